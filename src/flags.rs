//! Send flags.

bitflags::bitflags! {
    /// Flags of a send work request, with the values of rdma-core's `enum ibv_send_flags`
    /// (`infiniband/verbs.h`), so they pass through to `ibv_post_send` unchanged.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u32 {
        /// `IBV_SEND_FENCE`: wait for earlier RDMA READ and atomic operations to finish first.
        const FENCE = 1 << 0;
        /// `IBV_SEND_SIGNALED`: produce a completion for this request even if the queue only
        /// signals selected requests.
        const SIGNALED = 1 << 1;
        /// `IBV_SEND_SOLICITED`: set the solicited-event bit (meaningful with immediate data).
        const SOLICITED = 1 << 2;
        /// `IBV_SEND_INLINE`: copy the payload into the work request itself; the source needs
        /// no registration and may be reused as soon as the post returns.
        const INLINE = 1 << 3;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_match_ibv_send_flags() {
        assert_eq!(SendFlags::FENCE.bits(), 1);
        assert_eq!(SendFlags::SIGNALED.bits(), 2);
        assert_eq!(SendFlags::SOLICITED.bits(), 4);
        assert_eq!(SendFlags::INLINE.bits(), 8);
    }
}
