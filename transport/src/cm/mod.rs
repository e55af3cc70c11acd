//! Sans-IO connection manager. TODO(cm helper)
