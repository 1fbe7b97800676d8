//! The busy-poll load generator, generic over the core posting API: RDMA WRITEs ([`run`]),
//! READs ([`run_reads`]) and SENDs into posted receives ([`run_sends`]).
//!
//! The same loop drives every backend (the mlx5 driver on its device model or on VFIO, the rxe
//! shim): it only needs a [`Post`] queue, a pool of registered source buffers, a registered
//! destination the caller can read back, and the destination's remote address.
//!
//! Each write `i` gathers `[stamp_i, pattern pieces...]` into destination slot `i % slots`:
//! the 8-byte stamp is the write number (from a ring of registered stamp cells that are only
//! reused after their write completed), so a verification after the completion proves that this
//! write, not an earlier one into the same slot, landed, and every payload byte is compared.
//! Writes mix SGE counts, inline and gathered sources, and are posted in batches with selective
//! signalling; completion latency is measured from post to reap of each signalled write.

use std::time::{Duration, Instant};

use rdma_pmd::{
    Completion, DestBuf, Error, LocalBuf, Post, RecvQueue, RemoteBuf, Result, SendFlags, SendQueue,
    SendRequest, WcStatus,
};

/// What to run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Writes to post.
    pub writes: u64,
    /// Requests per doorbell.
    pub batch: u32,
    /// Signal one request in this many (the last of each batch is always signalled).
    pub signal_every: u32,
    /// Gather sizes to cycle through: number of pattern pieces after the stamp (0 = stamp only).
    pub pieces: Vec<usize>,
    /// Bytes per pattern piece.
    pub piece_len: usize,
    /// Every n-th write goes inline (0 = never).
    pub inline_every: u64,
    /// Compare the destination after each signalled completion.
    pub verify: bool,
    /// Print progress every this many writes (0 = never).
    pub progress_every: u64,
    /// Give up if no completion arrives within this many polls.
    pub max_idle_polls: u64,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            writes: 100_000,
            batch: 16,
            signal_every: 16,
            pieces: vec![1, 2, 4, 3],
            piece_len: 64,
            inline_every: 5,
            verify: true,
            progress_every: 0,
            max_idle_polls: 50_000_000,
        }
    }
}

/// The registered memory a run uses.
pub struct Buffers<'r> {
    /// Stamp cells, 8 bytes each, registered; the loop writes write numbers into them.
    pub stamps: Vec<LocalBuf<'r>>,
    /// Pattern pieces, `piece_len` bytes each, registered, filled by [`fill_pattern`].
    pub pieces: Vec<LocalBuf<'r>>,
    /// Destination slots on the remote side, `slot_len` bytes apart.
    pub remote: RemoteBuf,
    /// Number of destination slots.
    pub slots: u64,
    /// Bytes per destination slot.
    pub slot_len: usize,
}

/// The two things the loop needs from the backend besides the queue.
pub trait Host {
    /// Store an 8-byte stamp into stamp cell `cell` (CPU write to registered memory).
    fn write_stamp(&mut self, cell: usize, value: u64);
    /// Read `out.len()` bytes of destination slot memory at byte offset `off`.
    fn read_dest(&mut self, off: usize, out: &mut [u8]);
    /// The busy loop's other duties, run when a poll found nothing (on a wire: answering ARP).
    fn idle(&mut self) {}
}

/// Bytes of pattern piece `k` (what [`fill_pattern`] writes and verification expects).
pub fn pattern_byte(piece: usize, i: usize) -> u8 {
    (piece as u8).wrapping_mul(37).wrapping_add(i as u8).wrapping_add(1)
}

/// Fill a pattern piece buffer.
pub fn fill_pattern(piece: usize, out: &mut [u8]) {
    for (i, b) in out.iter_mut().enumerate() {
        *b = pattern_byte(piece, i);
    }
}

/// Figures of a run.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Writes completed successfully.
    pub writes: u64,
    /// Payload bytes written.
    pub bytes: u64,
    /// Wall time of the posting/polling loop.
    pub elapsed: Duration,
    /// Latencies, nanoseconds, sorted: post to reap of each signalled write or READ; for
    /// SENDs, post of a batch to the receive completion of its last SEND.
    pub latencies_ns: Vec<u64>,
    /// Writes whose destination was compared byte for byte.
    pub verified: u64,
    /// Writes posted inline.
    pub inline: u64,
    /// Doorbells rung.
    pub doorbells: u64,
}

impl Report {
    /// Messages per second.
    pub fn msg_rate(&self) -> f64 {
        self.writes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
    /// Payload gigabytes (10^9) per second.
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64().max(1e-9) / 1e9
    }
    /// Latency percentile `p` in 0..=100, nanoseconds.
    pub fn percentile(&self, p: f64) -> u64 {
        if self.latencies_ns.is_empty() {
            return 0;
        }
        let idx = ((p / 100.0) * (self.latencies_ns.len() - 1) as f64).round() as usize;
        self.latencies_ns[idx.min(self.latencies_ns.len() - 1)]
    }
    /// A readable table.
    pub fn table(&self, title: &str) -> String {
        format!(
            "{title}\n\
             \x20 writes        {:>14}\n\
             \x20 verified      {:>14}\n\
             \x20 inline        {:>14}\n\
             \x20 doorbells     {:>14}\n\
             \x20 elapsed       {:>12.3} s\n\
             \x20 messages/s    {:>14.0}\n\
             \x20 GB/s          {:>14.3}\n\
             \x20 latency p50   {:>11.2} us\n\
             \x20 latency p99   {:>11.2} us\n\
             \x20 latency p99.9 {:>11.2} us\n\
             \x20 latency max   {:>11.2} us",
            self.writes,
            self.verified,
            self.inline,
            self.doorbells,
            self.elapsed.as_secs_f64(),
            self.msg_rate(),
            self.gbps(),
            self.percentile(50.0) as f64 / 1e3,
            self.percentile(99.0) as f64 / 1e3,
            self.percentile(99.9) as f64 / 1e3,
            self.latencies_ns.last().copied().unwrap_or(0) as f64 / 1e3,
        )
    }
}

/// Per in-flight signalled write: what to check when it completes.
#[derive(Clone, Copy, Default)]
struct Pending {
    first: u64,
    last: u64,
    posted: Option<Instant>,
}

/// Run `plan` on `q`.
///
/// Every write is accounted for: a signalled completion retires itself and every earlier
/// unsignalled write; any completion with an error status stops the run with
/// [`Error::Device`] carrying EIO after the failure is printed.
pub fn run<'r, Q: SendQueue<'r> + ?Sized>(
    q: &mut Q,
    bufs: &Buffers<'r>,
    host: &mut dyn Host,
    plan: &Plan,
) -> Result<Report> {
    let caps = q.caps();
    let max_pieces = plan.pieces.iter().copied().max().unwrap_or(0);
    if max_pieces + 1 > caps.max_sge as usize {
        return Err(Error::TooManySges { given: max_pieces + 1, max: caps.max_sge as usize });
    }
    if 8 + max_pieces * plan.piece_len > bufs.slot_len || bufs.pieces.len() < max_pieces {
        return Err(Error::InvalidArgument("destination slot or piece pool too small"));
    }
    let cells = bufs.stamps.len() as u64;
    // In flight at most: the stamp cells, the queue depth, and the destination slots (a slot is
    // verified after its write completed, so it must not be rewritten before).
    let window = cells.min(caps.max_send_wr as u64).min(bufs.slots).max(1);
    let batch = (plan.batch.max(1) as u64).min(window) as u32;
    let mut rep = Report { latencies_ns: Vec::with_capacity(1 << 16), ..Default::default() };
    let mut pending: std::collections::VecDeque<Pending> = Default::default();
    let mut wc = [Completion::default(); 64];
    let mut scratch = vec![0u8; bufs.slot_len];
    let mut sgl: Vec<LocalBuf<'r>> = Vec::with_capacity(max_pieces + 1);
    let mut inline_buf = vec![0u8; bufs.slot_len];
    let (mut posted, mut completed) = (0u64, 0u64);
    let start = Instant::now();
    let mut next_progress = plan.progress_every;

    while completed < plan.writes {
        // Post a batch if the window has room.
        let room = window - (posted - completed);
        let n = (plan.writes - posted).min(room).min(batch as u64);
        if n > 0 {
            let t = Instant::now();
            let mut b = q.batch();
            let first = posted;
            for k in 0..n {
                let i = posted + k;
                let pieces = plan.pieces[(i % plan.pieces.len() as u64) as usize];
                let slot = i % bufs.slots;
                let remote = bufs.remote.offset(slot * bufs.slot_len as u64);
                let last_of_batch = k + 1 == n;
                let mut flags = SendFlags::empty();
                if last_of_batch || (i + 1) % plan.signal_every.max(1) as u64 == 0 {
                    flags |= SendFlags::SIGNALED;
                }
                let inline = plan.inline_every > 0 && i % plan.inline_every == 0;
                let len = 8 + pieces * plan.piece_len;
                if inline && len <= caps.max_inline as usize {
                    inline_buf[..8].copy_from_slice(&i.to_le_bytes());
                    for p in 0..pieces {
                        let at = 8 + p * plan.piece_len;
                        fill_pattern(p, &mut inline_buf[at..at + plan.piece_len]);
                    }
                    b.post_write_inline(i, &[&inline_buf[..len]], flags, remote)?;
                    rep.inline += 1;
                } else {
                    let cell = (i % cells) as usize;
                    host.write_stamp(cell, i);
                    sgl.clear();
                    sgl.push(bufs.stamps[cell]);
                    sgl.extend_from_slice(&bufs.pieces[..pieces]);
                    b.post(&SendRequest::write(
                        i,
                        rdma_pmd::Source::sgl(&sgl),
                        flags,
                        remote,
                        None,
                    ))?;
                }
                if flags.contains(SendFlags::SIGNALED) {
                    let from = pending.back().map(|p| p.last + 1).unwrap_or(first.max(completed));
                    pending.push_back(Pending { first: from, last: i, posted: Some(t) });
                }
            }
            b.commit();
            rep.doorbells += 1;
            posted += n;
        }

        // Reap.
        let mut idle = 0u64;
        loop {
            let got = q.poll(&mut wc)?;
            for c in &wc[..got] {
                if c.status != WcStatus::Success {
                    eprintln!(
                        "loadgen: write {} failed: {:?} (vendor {:#x})",
                        c.wr_id, c.status, c.vendor_err
                    );
                    return Err(Error::Device(rdma_pmd::Errno::EIO));
                }
                let p =
                    pending.pop_front().ok_or(Error::InvalidArgument("unexpected completion"))?;
                if p.last != c.wr_id {
                    eprintln!("loadgen: completion for {} while {} was expected", c.wr_id, p.last);
                    return Err(Error::Device(rdma_pmd::Errno::EIO));
                }
                if let Some(t) = p.posted {
                    rep.latencies_ns.push(t.elapsed().as_nanos() as u64);
                }
                if plan.verify {
                    for i in p.first..=p.last {
                        verify_one(host, bufs, plan, i, &mut scratch)?;
                        rep.verified += 1;
                    }
                }
                for i in p.first..=p.last {
                    let pieces = plan.pieces[(i % plan.pieces.len() as u64) as usize];
                    rep.bytes += (8 + pieces * plan.piece_len) as u64;
                }
                completed = p.last + 1;
            }
            if got > 0 || (posted < plan.writes && posted - completed < window) {
                break;
            }
            host.idle();
            idle += 1;
            if idle > plan.max_idle_polls {
                return Err(Error::Timeout("completions in the load generator"));
            }
            std::hint::spin_loop();
        }
        if plan.progress_every > 0 && completed >= next_progress {
            eprintln!("  .. {completed} / {} writes", plan.writes);
            next_progress += plan.progress_every;
        }
    }
    rep.elapsed = start.elapsed();
    rep.writes = completed;
    rep.latencies_ns.sort_unstable();
    Ok(rep)
}

fn verify_one(
    host: &mut dyn Host,
    bufs: &Buffers<'_>,
    plan: &Plan,
    i: u64,
    scratch: &mut [u8],
) -> Result<()> {
    let pieces = plan.pieces[(i % plan.pieces.len() as u64) as usize];
    let len = 8 + pieces * plan.piece_len;
    let off = (i % bufs.slots) as usize * bufs.slot_len;
    host.read_dest(off, &mut scratch[..len]);
    let stamp = u64::from_le_bytes(scratch[..8].try_into().expect("8 bytes"));
    let mut bad = stamp != i;
    for p in 0..pieces {
        let at = 8 + p * plan.piece_len;
        bad |= scratch[at..at + plan.piece_len]
            .iter()
            .enumerate()
            .any(|(k, b)| *b != pattern_byte(p, k));
    }
    if bad {
        eprintln!("loadgen: destination of write {i} (slot at {off:#x}) holds the wrong bytes (stamp {stamp})");
        return Err(Error::Device(rdma_pmd::Errno::EIO));
    }
    Ok(())
}

/// The byte at offset `off` of the region a READ run reads from (what the caller fills it with
/// and what each READ is checked against).
pub fn read_source_byte(off: usize) -> u8 {
    (off as u8).wrapping_mul(31).wrapping_add((off >> 8) as u8).wrapping_add(7)
}

/// A READ run: `plan.writes` RDMA READs of `len` bytes each, from `remote` (a region of
/// `slots * len` bytes filled with [`read_source_byte`]) into the destination buffers `dests`
/// (each at least `len` bytes), in batches of `plan.batch` with the last one signalled. Every
/// batch's buffers come back from their `Pending`s only after its completion, and each is
/// compared byte for byte. Returns the figures (`writes` counts the READs).
pub fn run_reads<'r, Q: SendQueue<'r>>(
    q: &mut Q,
    dests: Vec<DestBuf<'r>>,
    remote: RemoteBuf,
    slots: u64,
    len: usize,
    plan: &Plan,
) -> Result<Report> {
    run_reads_idle(q, dests, remote, slots, len, plan, &mut || {})
}

/// [`run_reads`], calling `idle` whenever a poll finds nothing (the busy loop's other
/// duties, as [`Host::idle`]).
pub fn run_reads_idle<'r, Q: SendQueue<'r>>(
    q: &mut Q,
    mut dests: Vec<DestBuf<'r>>,
    remote: RemoteBuf,
    slots: u64,
    len: usize,
    plan: &Plan,
    on_idle: &mut dyn FnMut(),
) -> Result<Report> {
    let batch = (plan.batch as usize).clamp(1, dests.len()).min(q.caps().max_send_wr as usize);
    let mut rep = Report::default();
    let mut wc = [Completion::default(); 4];
    let mut got = vec![0u8; len];
    let start = Instant::now();
    let mut i = 0u64;
    while i < plan.writes {
        let n = (plan.writes - i).min(batch as u64) as usize;
        let t = Instant::now();
        let mut pend = Vec::with_capacity(n);
        let mut b = q.batch();
        for k in 0..n {
            let d = dests.pop().ok_or(Error::InvalidArgument("no destination buffer"))?;
            let slot = (i + k as u64) % slots;
            let flags = if k + 1 == n { SendFlags::SIGNALED } else { SendFlags::empty() };
            let from = remote.offset(slot * len as u64);
            match b.post_read(i + k as u64, d, flags, from) {
                Ok(p) => pend.push((slot, p)),
                Err(refused) => return Err(refused.error),
            }
        }
        b.commit();
        rep.doorbells += 1;
        let mut idle = 0u64;
        loop {
            let k = q.poll(&mut wc)?;
            if k > 0 {
                if wc[0].status != WcStatus::Success || wc[0].wr_id != i + n as u64 - 1 {
                    eprintln!("loadgen: READ completion {:?}", wc[0]);
                    return Err(Error::Device(rdma_pmd::Errno::EIO));
                }
                break;
            }
            on_idle();
            idle += 1;
            if idle > plan.max_idle_polls {
                return Err(Error::Timeout("READ completions in the load generator"));
            }
            std::hint::spin_loop();
        }
        rep.latencies_ns.push(t.elapsed().as_nanos() as u64);
        for (slot, p) in pend {
            let d = p.reclaim(&*q).map_err(|_| Error::InvalidArgument("READ not retired"))?;
            if plan.verify {
                d.read(0, &mut got)?;
                let base = slot as usize * len;
                if got.iter().enumerate().any(|(k, b)| *b != read_source_byte(base + k)) {
                    eprintln!("loadgen: READ of slot {slot} brought the wrong bytes");
                    return Err(Error::Device(rdma_pmd::Errno::EIO));
                }
                rep.verified += 1;
            }
            dests.push(d);
        }
        rep.bytes += (n * len) as u64;
        i += n as u64;
    }
    rep.elapsed = start.elapsed();
    rep.writes = i;
    rep.latencies_ns.sort_unstable();
    Ok(rep)
}

/// A SEND run: `plan.writes` SENDs from `a` (each the gather `[stamp, pieces...]` as for
/// writes, or inline every `plan.inline_every`-th) into receives posted on `b` with the
/// buffers `rx` (each at least one slot), each receive scattering into two pieces of its
/// buffer. Every receive is checked: its byte count, then the stamp and pattern bytes, which
/// come back from the receive's `Pending` only after its completion. `writes` counts the
/// SENDs.
pub fn run_sends<'r, A: SendQueue<'r>, B: RecvQueue<'r>>(
    a: &mut A,
    b: &mut B,
    rx: Vec<DestBuf<'r>>,
    bufs: &Buffers<'r>,
    host: &mut dyn Host,
    plan: &Plan,
) -> Result<Report> {
    let max_pieces = plan.pieces.iter().copied().max().unwrap_or(0);
    let slot = 8 + max_pieces * plan.piece_len;
    let window = rx.len().min(b.recv_caps().max_recv_wr as usize).min(bufs.stamps.len());
    let mut posted_rx = std::collections::VecDeque::new();
    let mut spare: Vec<[DestBuf<'r>; 2]> = Vec::new();
    for mut d in rx {
        let tail = d.split_off(slot / 2)?;
        spare.push([d, tail]);
    }
    let mut rep = Report::default();
    let mut wc = [Completion::default(); 16];
    let mut sgl: Vec<LocalBuf<'r>> = Vec::with_capacity(max_pieces + 1);
    let mut want = vec![0u8; slot];
    let mut got = vec![0u8; slot];
    let (mut sent, mut received) = (0u64, 0u64);
    // The last SEND of each batch, with when its batch was posted: its receive's arrival
    // gives the latency sample.
    let mut timed: std::collections::VecDeque<(u64, Instant)> = Default::default();
    let start = Instant::now();
    while received < plan.writes {
        // Keep receives posted ahead of the sends.
        while posted_rx.len() < window && (received + posted_rx.len() as u64) < plan.writes {
            let bufs2 = spare.pop().ok_or(Error::InvalidArgument("no receive buffer"))?;
            match b.post_recvv(received + posted_rx.len() as u64, bufs2) {
                Ok(p) => posted_rx.push_back(p),
                Err(refused) => return Err(refused.error),
            }
        }
        // Send what the posted receives can take.
        let room = (received + posted_rx.len() as u64).min(plan.writes) - sent;
        let n = room.min(plan.batch.max(1) as u64);
        if n > 0 {
            let t = Instant::now();
            let max_inline = a.caps().max_inline as usize;
            let mut bt = a.batch();
            for k in 0..n {
                let i = sent + k;
                let pieces = plan.pieces[(i % plan.pieces.len() as u64) as usize];
                let len = 8 + pieces * plan.piece_len;
                let flags = if k + 1 == n { SendFlags::SIGNALED } else { SendFlags::empty() };
                if plan.inline_every > 0 && i % plan.inline_every == 0 && len <= max_inline {
                    want[..8].copy_from_slice(&i.to_le_bytes());
                    for p in 0..pieces {
                        let at = 8 + p * plan.piece_len;
                        fill_pattern(p, &mut want[at..at + plan.piece_len]);
                    }
                    bt.post_send_inline(i, &[&want[..len]], flags)?;
                    rep.inline += 1;
                } else {
                    let cell = (i % bufs.stamps.len() as u64) as usize;
                    host.write_stamp(cell, i);
                    sgl.clear();
                    sgl.push(bufs.stamps[cell]);
                    sgl.extend_from_slice(&bufs.pieces[..pieces]);
                    bt.post_sendv(i, &sgl, flags)?;
                }
            }
            bt.commit();
            rep.doorbells += 1;
            sent += n;
            timed.push_back((sent - 1, t));
        }
        // Reap both sides.
        let mut idle = 0u64;
        loop {
            let s = a.poll(&mut wc)?;
            if let Some(c) = wc[..s].iter().find(|c| c.status != WcStatus::Success) {
                eprintln!("loadgen: SEND {} failed: {:?}", c.wr_id, c.status);
                return Err(Error::Device(rdma_pmd::Errno::EIO));
            }
            let r = b.poll_recv(&mut wc)?;
            for c in &wc[..r] {
                let p = posted_rx.pop_front().ok_or(Error::InvalidArgument("stray receive"))?;
                let i = c.wr_id;
                let pieces = plan.pieces[(i % plan.pieces.len() as u64) as usize];
                let len = 8 + pieces * plan.piece_len;
                if c.status != WcStatus::Success || c.byte_len as usize != len || i != received {
                    eprintln!("loadgen: receive {i}: {c:?}, expected {len} bytes");
                    return Err(Error::Device(rdma_pmd::Errno::EIO));
                }
                let back =
                    p.reclaim(&*b).map_err(|_| Error::InvalidArgument("receive not retired"))?;
                if plan.verify {
                    let h = slot / 2;
                    back[0].read(0, &mut got[..h])?;
                    back[1].read(0, &mut got[h..slot])?;
                    let stamp = u64::from_le_bytes(got[..8].try_into().expect("8 bytes"));
                    let bad = stamp != i
                        || (0..pieces).any(|p| {
                            let at = 8 + p * plan.piece_len;
                            (0..plan.piece_len).any(|k| got[at + k] != pattern_byte(p, k))
                        });
                    if bad {
                        eprintln!("loadgen: receive {i} holds the wrong bytes");
                        return Err(Error::Device(rdma_pmd::Errno::EIO));
                    }
                    rep.verified += 1;
                }
                rep.bytes += len as u64;
                if timed.front().is_some_and(|&(last, _)| last == i) {
                    let (_, t) = timed.pop_front().expect("front");
                    rep.latencies_ns.push(t.elapsed().as_nanos() as u64);
                }
                spare.push(back);
                received += 1;
            }
            if r > 0 || s > 0 {
                break;
            }
            idle += 1;
            if idle > plan.max_idle_polls {
                return Err(Error::Timeout("receive completions in the load generator"));
            }
            std::hint::spin_loop();
        }
    }
    // The last SENDs' completions.
    let mut idle = 0u64;
    while a.outstanding() > 0 {
        let _ = a.poll(&mut wc)?;
        idle += 1;
        if idle > plan.max_idle_polls {
            return Err(Error::Timeout("SEND completions in the load generator"));
        }
    }
    rep.elapsed = start.elapsed();
    rep.writes = received;
    rep.latencies_ns.sort_unstable();
    Ok(rep)
}
