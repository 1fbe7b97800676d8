//! Unit tests: the model driven with hand-built WQE bytes (layouts from rdma-core's
//! `mlx5dv.h` and `qp.c`, built here without the driver's code).

mod harness;
mod hostile;

mod control;
mod datagram;
mod errors;
mod faults;
mod flush;
mod imm;
mod retry;
mod vectors;
mod verbs;
mod wire;
mod write;
