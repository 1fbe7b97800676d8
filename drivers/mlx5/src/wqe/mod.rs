//! Send WQEs: typed views of each segment, and the builder that writes whole WQEs into the
//! send ring.
//!
//! An RC RDMA WRITE WQE is a control segment ([`ctrl`]), a remote-address segment ([`raddr`]),
//! then either data segments ([`data`]) or one inline segment ([`inline`]); see
//! [`builder`] for the rules that size and fill it, and [`sink`] for how it reaches the ring.

pub mod builder;
pub mod ctrl;
pub mod data;
pub mod inline;
pub mod raddr;
pub mod sink;

pub use builder::{WqeBuilder, WqeInfo, WqeShape, MAX_INLINE, MAX_SGE};
pub use ctrl::CtrlSeg;
pub use data::DataSeg;
pub use inline::InlineSeg;
pub use raddr::RaddrSeg;
pub use sink::{FixedRing, RawRing, RingView, SliceRing, WqeSink};
