import './base.css';
import './statuses.css';
