//! The software RoCEv2 provider. TODO
