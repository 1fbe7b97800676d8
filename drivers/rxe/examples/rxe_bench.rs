//! The rxe side of `cargo xtask bench rxe`: our writev loop, measured the way perftest's
//! `ib_write_bw` and `ib_write_lat` measure theirs, so the two can be printed side by side.
//!
//! ```text
//! rxe_bench bw  --addr 10.0.0.1 --port 7600 --size 4096 --iters 2000 --depth 128 --signal 16 --sges 1
//! rxe_bench lat --addr 10.0.0.1 --port 7601 --size 64 --iters 1000 --inline 0
//! rxe_bench lat --impl c --addr 10.0.0.1 --port 7602 --size 64 --iters 1000
//! rxe_bench bw  --impl c --addr 10.0.0.1 --port 7603 --size 4096 --iters 2000 --depth 128 --signal 16
//! ```
//!
//! The defaults are the shape perftest gives its requests on rxe: one SGE (`--sges`), and no
//! inline data (`--inline`, perftest's `-I`: perftest inlines only on devices it recognises,
//! and rxe is not one of them, so its `ctx_set_max_inline` sets 0).
//!
//! * `bw`: one writer keeps up to `depth` RDMA WRITEs outstanding, signalling every `signal`-th
//!   (perftest's `-t` and `-Q`), and reports messages and MB (2^20 bytes, as perftest) per
//!   second from the first post to the last completion.
//! * `lat`: a ping-pong of RDMA WRITEs between two queue pairs, each side polling the last byte
//!   of its buffer for the peer's write (as `ib_write_lat` does); reports half the round trip.
//!
//! Both ends run in this process on two threads, through the core traits only: the loops are
//! generic over [`Post`], so any backend can run them.
//!
//! `--impl c` runs the same loop written as an ordinary librdmacm program would write it
//! (`c/peer.c`: `rdma_post_write`; for `lat` a volatile byte poll and `ibv_poll_cq` for each send
//! completion, for `bw` one SGE per write from the start of the buffer), also on two threads
//! here. It is the control: under emulation its ratio to perftest shows how far two equivalent
//! loops drift apart in one boot.

use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use rdma_pmd::{
    Completion, Error, LocalBuf, Post, RemoteBuf, Result, Rkey, SendFlags, SendQueue, WcStatus,
};
use rdma_pmd_rxe::peer::{self, TargetInfo};
use rdma_pmd_rxe::{Conn, Listener, QpConfig, Region, RxeQp};

/// Bound on every wait.
const WAIT: Duration = Duration::from_secs(120);

/// Post `iters` gather writes of `sgl` to `remote`, keeping at most `depth` outstanding and
/// signalling every `signal`-th (and the last); returns the time from the first post to the
/// last completion.
pub fn writev_loop<'r, Q: SendQueue<'r>>(
    q: &mut Q,
    sgl: &[LocalBuf<'r>],
    remote: RemoteBuf,
    iters: u64,
    depth: u32,
    signal: u64,
) -> Result<Duration> {
    let mut wcs = [Completion::default(); 32];
    let mut posted = 0u64;
    let start = Instant::now();
    let deadline = start + WAIT;
    let mut spins = 0u32;
    while posted < iters || q.outstanding() > 0 {
        while posted < iters && q.outstanding() < depth {
            posted += 1;
            let flags = if posted.is_multiple_of(signal) || posted == iters {
                SendFlags::SIGNALED
            } else {
                SendFlags::empty()
            };
            q.post_writev(posted, sgl, flags, remote)?;
        }
        let n = q.poll(&mut wcs)?;
        if let Some(bad) = wcs[..n].iter().find(|c| c.status != WcStatus::Success) {
            eprintln!("rxe_bench: completion {bad:?}");
            return Err(Error::Device(rdma_pmd::Errno::EIO));
        }
        // The clock is read only every 1024 polls: in a guest without a stable TSC every
        // read is a system call, which would slow the very loop being measured.
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024) && Instant::now() > deadline {
            return Err(Error::Timeout("the writev loop"));
        }
    }
    Ok(start.elapsed())
}

/// Polls of [`await_byte`] between two reads of the clock.
const POLLS_PER_CLOCK_READ: u32 = 1 << 20;

/// Wait until byte `at` of `region` reads `want`.
fn await_byte(region: &Region<'_>, at: usize, want: u8) -> Result<()> {
    let mut b = [0u8];
    let mut deadline = None;
    let mut spins = 0u32;
    loop {
        region.read(at, &mut b)?;
        if b[0] == want {
            return Ok(());
        }
        // The clock bounds the wait but is read rarely: first after 2^20 polls, never on
        // entry. In a guest whose clocksource is not the TSC every read is a system call, and
        // a write that lands during one is seen that much later, so frequent reads would add
        // to the very latency measured (docs/PERF.md). No `spin_loop()` (PAUSE) either, as
        // perftest's `while (*poll_buf != ...)` has none: under TCG every PAUSE leaves the
        // translated code for the emulator's main loop (`helper_pause`).
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(POLLS_PER_CLOCK_READ) {
            let now = Instant::now();
            if now > *deadline.get_or_insert(now + WAIT) {
                return Err(Error::Timeout("the peer's write"));
            }
        }
    }
}

/// One side of the ping-pong: for each round, (if `first`) write then wait, else wait then
/// write. `mine` holds two `size`-byte halves: the peer writes into the first, ours are sent
/// from the second; the payload's last byte carries the round number. Returns per-round times.
fn ping_pong<'r, Q: SendQueue<'r>>(
    q: &mut Q,
    mine: &'r Region<'_>,
    remote: RemoteBuf,
    size: usize,
    iters: u64,
    first: bool,
    inline: bool,
) -> Result<Vec<Duration>> {
    let mut times = Vec::with_capacity(iters as usize);
    let mut wcs = [Completion::default(); 8];
    let last = size - 1;
    let mut flags = SendFlags::SIGNALED;
    if inline {
        flags |= SendFlags::INLINE;
    }
    // Rounds are timed with the time-stamp counter, as perftest does (`get_cycles`): in a guest
    // without a stable TSC clocksource every `Instant::now()` is a system call, which would be
    // part of what is measured. The counter is converted with the rate seen over the whole run.
    let mut ticks = Vec::with_capacity(iters as usize);
    // The source is the same every round (as perftest's prebuilt scatter-gather element).
    let src = mine.buf(size, size)?;
    let (run0, tsc0) = (Instant::now(), tsc());
    for round in 1..=iters {
        let tag = (round % 251 + 1) as u8;
        let t0 = tsc();
        if !first {
            await_byte(mine, last, tag)?;
        }
        mine.write(size + last, &[tag])?;
        q.post_write(round, src, flags, remote)?;
        if first {
            await_byte(mine, last, tag)?;
        }
        ticks.push(tsc().wrapping_sub(t0));
        // Reap what completed; a round's own completion may still be on its way.
        q.poll(&mut wcs)?;
        while q.outstanding() > 4 {
            q.poll(&mut wcs)?;
        }
    }
    let ns_per_tick = run0.elapsed().as_nanos() as f64 / tsc().wrapping_sub(tsc0).max(1) as f64;
    times.extend(ticks.iter().map(|t| Duration::from_nanos((*t as f64 * ns_per_tick) as u64)));
    Ok(times)
}

/// The time-stamp counter (x86_64), or a monotonic nanosecond count elsewhere.
fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc reads a counter and has no memory effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

struct Args {
    mode: String,
    addr: String,
    port: u16,
    size: usize,
    iters: u64,
    depth: u32,
    signal: u64,
    /// SGEs the bandwidth run gathers each message from.
    sges: usize,
    /// Messages up to this many bytes are sent inline in the latency run.
    inline: usize,
    /// `ours` (the core API on `RxeQp`) or `c` (the librdmacm control; one SGE).
    imp: String,
}

fn args() -> Args {
    let mut a = Args {
        mode: String::new(),
        addr: "10.0.0.1".into(),
        port: 7600,
        size: 64,
        iters: 1000,
        depth: 128,
        signal: 16,
        sges: 1,
        inline: 0,
        imp: "ours".into(),
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    a.mode = v.first().cloned().unwrap_or_default();
    for kv in v[1..].chunks(2) {
        let val = kv.get(1).cloned().unwrap_or_default();
        let num =
            || val.parse::<u64>().unwrap_or_else(|_| panic!("{}: not a number: {val}", kv[0]));
        match kv[0].as_str() {
            "--addr" => a.addr = val.clone(),
            "--port" => a.port = num() as u16,
            "--size" => a.size = num() as usize,
            "--iters" => a.iters = num(),
            "--depth" => a.depth = num() as u32,
            "--signal" => a.signal = num().max(1),
            "--sges" => a.sges = (num() as usize).clamp(1, 8),
            "--inline" => a.inline = num() as usize,
            "--impl" => a.imp = val.clone(),
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// The passive end: a target region, handed over in the accept; for `lat` it also writes back.
fn server(
    a: &Args,
    ready: std::sync::mpsc::Sender<()>,
    done: std::sync::mpsc::Receiver<()>,
) -> Result<()> {
    let l = Listener::bind(&a.addr, a.port)?;
    ready.send(()).ok();
    let conn = l.get_request()?;
    let peer = TargetInfo::from_bytes(&conn.peer_data())?;
    let region = Region::write_target(&conn, 2 * a.size.max(64))?;
    let mut qp = RxeQp::create(&conn, QpConfig { max_inline: 64, ..QpConfig::default() })?;
    let r = region.remote();
    qp.accept(&TargetInfo { addr: r.addr, rkey: r.rkey.get(), len: a.size as u32 }.to_bytes())?;
    if a.mode == "lat" {
        let inline = a.size <= a.inline.min(qp_inline(&qp));
        let remote = RemoteBuf::new(peer.addr, Rkey(peer.rkey));
        ping_pong(&mut qp, &region, remote, a.size, a.iters, false, inline)?;
    }
    done.recv_timeout(WAIT).ok();
    Ok(())
}

fn qp_inline(qp: &RxeQp<'_>) -> usize {
    use rdma_pmd::SendQueue;
    qp.caps().max_inline as usize
}

fn main() {
    let a = args();
    let c = a.imp == "c";
    if (a.mode != "bw" && a.mode != "lat") || !(a.imp == "ours" || c) {
        eprintln!(
            "usage: rxe_bench bw|lat [--addr A] [--port P] [--size S] [--iters N] [--depth D] \
             [--signal K] [--sges G] [--inline BYTES] [--impl ours|c]"
        );
        std::process::exit(2);
    }
    if c {
        match if a.mode == "lat" { c_lat(&a) } else { c_bw(&a) } {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("rxe_bench: C {}: {e:?}", a.mode);
                std::process::exit(1);
            }
        }
        return;
    }
    let (ready_tx, ready_rx) = channel();
    let (done_tx, done_rx) = channel();
    let sa = Args { mode: a.mode.clone(), addr: a.addr.clone(), imp: a.imp.clone(), ..a };
    let srv = std::thread::spawn(move || server(&sa, ready_tx, done_rx));
    ready_rx.recv_timeout(WAIT).expect("server listening");
    let result = client(&a);
    done_tx.send(()).ok();
    let srv = srv.join().expect("server thread");
    match (result, srv) {
        (Ok(line), Ok(())) => println!("{line}"),
        (r, s) => {
            eprintln!("rxe_bench: client {:?}, server {:?}", r.err(), s.err());
            std::process::exit(1);
        }
    }
}

fn client(a: &Args) -> Result<String> {
    let conn = Conn::resolve(&a.addr, a.port)?;
    let region = Region::write_target(&conn, 2 * a.size.max(64))?;
    let mut qp = RxeQp::create(
        &conn,
        QpConfig { max_send_wr: a.depth.max(8), max_inline: 64, ..QpConfig::default() },
    )?;
    let r = region.remote();
    qp.connect(&TargetInfo { addr: r.addr, rkey: r.rkey.get(), len: a.size as u32 }.to_bytes())?;
    let peer = TargetInfo::from_bytes(&conn.peer_data())?;
    let remote = RemoteBuf::new(peer.addr, Rkey(peer.rkey));
    if a.mode == "bw" {
        region.write(0, &vec![0x5a; a.size])?;
        // The message gathered from `sges` consecutive pieces (the last takes the remainder).
        let n = a.sges.min(a.size.max(1));
        let piece = a.size / n;
        let mut sgl = Vec::with_capacity(n);
        for i in 0..n {
            let len = if i + 1 == n { a.size - piece * i } else { piece };
            sgl.push(region.buf(piece * i, len)?);
        }
        let t = writev_loop(&mut qp, &sgl, remote, a.iters, a.depth, a.signal)?;
        Ok(bw_line("ours", a, n, t))
    } else {
        let inline = a.size <= a.inline.min(qp_inline(&qp));
        let t = ping_pong(&mut qp, &region, remote, a.size, a.iters, true, inline)?;
        Ok(format!("ours lat size={} iters={} inline={inline} {}", a.size, a.iters, lat_stats(t)))
    }
}

/// Minimum, median ("typical", as perftest calls it) and mean of the round trips, halved.
fn lat_stats(mut t: Vec<Duration>) -> String {
    let n = t.len().max(1) as u32;
    let total: Duration = t.iter().sum();
    t.sort();
    let half_us = |d: Duration| d.as_secs_f64() * 1e6 / 2.0;
    let (min, typ) = (t.first().copied().unwrap_or_default(), t.get(t.len() / 2).copied());
    format!(
        "t_min_us={:.2} t_typical_us={:.2} t_avg_us={:.2}",
        half_us(min),
        half_us(typ.unwrap_or_default()),
        half_us(total / n)
    )
}

/// Messages and MB (2^20 bytes) per second, as perftest reports them.
fn bw_line(who: &str, a: &Args, sges: usize, t: Duration) -> String {
    let s = t.as_secs_f64();
    let msgs = a.iters as f64 / s;
    format!(
        "{who} bw size={} iters={} depth={} signal={} sges={sges} secs={s:.4} msg_per_s={msgs:.0} mb_per_s={:.2}",
        a.size,
        a.iters,
        a.depth,
        a.signal,
        msgs * a.size as f64 / 1048576.0
    )
}

/// The bandwidth control: both ends of the C stream of writes, the target on a second thread.
fn c_bw(a: &Args) -> Result<String> {
    let (size, iters, depth, signal) = (a.size as u32, a.iters as u32, a.depth, a.signal as u32);
    let run = move |ip: &str, port, end| peer::c_writes(ip, port, end, size, iters, depth, signal);
    let (_, t) = peer::both_ends(&a.addr, a.port, WAIT, run)?;
    Ok(bw_line("c", a, 1, t.ok_or(Error::Device(rdma_pmd::Errno::EIO))?))
}

/// The latency control: both ends of the C ping-pong, the passive one on a second thread.
fn c_lat(a: &Args) -> Result<String> {
    let (size, iters) = (a.size as u32, a.iters as u32);
    let run = move |ip: &str, port, end| peer::c_pingpong(ip, port, end, size, iters);
    let (_, t) = peer::both_ends(&a.addr, a.port, WAIT, run)?;
    Ok(format!("c lat size={} iters={} {}", a.size, a.iters, lat_stats(t)))
}
