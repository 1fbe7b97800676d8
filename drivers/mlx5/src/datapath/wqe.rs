//! The send WQE builder and the ring sinks it writes through; the segment layouts it encodes
//! are in [`crate::layout::wqe`]. See [`builder`] for the rules that size and fill a WQE, and
//! [`sink`] for how it reaches the ring.

pub mod builder;
pub mod sink;

pub use builder::{WqeBuilder, WqeInfo, WqeShape, MAX_INLINE, MAX_SGE};
pub use sink::{FixedRing, RawRing, RingView, SliceRing, WqeSink};
