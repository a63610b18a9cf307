"""What a session's workers save of their namespaces before a restart, and how it comes back: ``namespace``
(the save, the values put back at start, ``restore_session_state``) and ``objects`` (models, variables and
checkpointable objects as files, without pickle)."""
