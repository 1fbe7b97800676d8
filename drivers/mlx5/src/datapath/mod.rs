//! The data path: what a post and a completion do, one module per direction, in the order
//! rdma-core's provider keeps them (`providers/mlx5/qp.c` posts, `cq.c` polls).
//!
//! | module | what |
//! |---|---|
//! | [`send`] | the send queue: WQE bookkeeping, push, commit, abort, and the retirement a completion drives (`qp.c` `_mlx5_post_send`, `cq.c` `mlx5_parse_cqe` for the requester side) |
//! | [`doorbell`] | how a batch is announced: the doorbell record, then the 8-byte doorbell or a BlueFlame copy (`qp.c` `post_send_db`) |
//! | [`wqe`] | the WQE encoder and the ring sinks it stores through |
//! | [`cq`] | completion queue rings: ownership, the from-device barrier, the consumer-index doorbell record |
//! | [`recv`] | the receive queue: receive WQEs, and responder CQEs turned into completions |
//! | [`eth`] | the Ethernet (raw packet) rings: an SQ of frames, a cyclic RQ of frame buffers |

pub mod cq;
pub mod doorbell;
pub mod eth;
pub mod recv;
pub mod send;
pub mod wqe;
