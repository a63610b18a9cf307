"""The fence around TensorFlow's and Keras's private symbols: every import of ``tensorflow.python``,
``keras.src`` or ``tf_keras.src`` lives here, registered in ``internals`` with its upstream issue and the
versions it was checked on.
"""
