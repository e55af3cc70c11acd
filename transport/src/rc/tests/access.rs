//! Remote access checks, memory windows and SEND with Invalidate.
use super::*;
