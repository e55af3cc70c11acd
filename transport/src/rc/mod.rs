//! Sans-IO Reliable Connection core. TODO(rc helper)
