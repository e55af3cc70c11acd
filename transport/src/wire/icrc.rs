//! TODO(wire helper)
