//! Test support: a target (the passive end) on its own thread, served over channels, and
//! bounded completion waits. Both ends use only the core traits plus the rxe setup calls.

#![allow(dead_code)]

use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdma_pmd::{Completion, DestBuf, Pending, RecvQueue, RemoteBuf, Rkey, SendQueue};
use rdma_pmd_rxe::peer::TargetInfo;
use rdma_pmd_rxe::{Conn, Listener, QpConfig, Region, RxeQp};

/// Bound of every wait in these tests (TCG guests are slow, but not this slow).
pub const WAIT: Duration = Duration::from_secs(30);

/// The address of the single-host rxe netdev (`RXE_ADDR`, default 10.0.0.1).
pub fn addr() -> String {
    std::env::var("RXE_ADDR").unwrap_or_else(|_| "10.0.0.1".into())
}

/// Enter the network namespace at `path` (for this thread only).
pub fn enter_netns(path: &str) {
    use std::os::fd::AsRawFd;
    extern "C" {
        fn setns(fd: i32, nstype: i32) -> i32;
    }
    const CLONE_NEWNET: i32 = 0x4000_0000;
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("open {path}: {e}"));
    // SAFETY: a valid namespace fd; setns only changes this thread's network namespace.
    let rc = unsafe { setns(f.as_raw_fd(), CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns({path}): {}", std::io::Error::last_os_error());
}

/// Reap `n` completions from `poll`, panicking after [`WAIT`].
pub fn wait(
    mut poll: impl FnMut(&mut [Completion]) -> rdma_pmd::Result<usize>,
    n: usize,
) -> Vec<Completion> {
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::new();
    let mut buf = [Completion::default(); 16];
    while got.len() < n {
        let k = poll(&mut buf[..(n - got.len()).min(16)]).expect("poll");
        got.extend_from_slice(&buf[..k]);
        assert!(Instant::now() < deadline, "only {} of {n} completions after {WAIT:?}", got.len());
        if k == 0 {
            std::hint::spin_loop();
        }
    }
    got
}

/// Reap `n` send completions.
pub fn wait_send<'r, Q: SendQueue<'r>>(q: &mut Q, n: usize) -> Vec<Completion> {
    wait(|out| q.poll(out), n)
}

enum Cmd {
    Read(usize, usize),
    Write(usize, Vec<u8>),
    ReadRecv(usize, usize),
    Recv(usize),
    Quit,
}

enum Reply {
    Bytes(Vec<u8>),
    Wcs(Vec<Completion>),
}

/// The passive end: listens, registers a target of every remote access (writes, reads,
/// atomics), posts receives (64-byte buffers), and
/// accepts with the target's [`TargetInfo`] as private data. Then serves reads of its memory
/// and reaps receive completions on request.
pub struct Target {
    cmd: Sender<Cmd>,
    reply: Receiver<Reply>,
    handle: Option<JoinHandle<()>>,
}

/// Receive buffer bytes per posted receive.
pub const RECV_BUF: usize = 64;

impl Target {
    /// Start a target on `ip:port` (in network namespace `netns`, if given) with `len` bytes
    /// and `recvs` posted receives. Returns once it listens.
    pub fn spawn(ip: &str, port: u16, len: usize, recvs: u32, netns: Option<String>) -> Target {
        let (cmd_tx, cmd_rx) = channel::<Cmd>();
        let (reply_tx, reply_rx) = channel::<Reply>();
        let (ready_tx, ready_rx) = channel::<()>();
        let ip = ip.to_string();
        let handle = std::thread::spawn(move || {
            if let Some(ns) = netns {
                enter_netns(&ns);
            }
            let l = Listener::bind(&ip, port).expect("listen");
            ready_tx.send(()).unwrap();
            let conn = l.get_request().expect("get_request");
            let region = Region::remote_target(&conn, len).expect("register target");
            let mut rbuf = Region::msgs(&conn, RECV_BUF * recvs.max(1) as usize).expect("recv buf");
            let cfg = QpConfig { max_recv_wr: recvs.max(1), ..QpConfig::default() };
            let mut qp = RxeQp::create(&conn, cfg).expect("target qp");
            // Receive `i` owns bytes [i * RECV_BUF, (i + 1) * RECV_BUF) until it retires.
            let mut pending: Vec<Pending<DestBuf<'_>>> = Vec::new();
            let mut rest = rbuf.dest().expect("recv dest");
            for i in 0..recvs as u64 {
                let tail = rest.split_off(RECV_BUF).expect("split");
                pending.push(qp.post_recv(i, rest).map_err(|r| r.error).expect("post_recv"));
                rest = tail;
            }
            let mut pending: Vec<Option<Pending<DestBuf<'_>>>> =
                pending.into_iter().map(Some).collect();
            let mut bufs: Vec<Option<DestBuf<'_>>> = (0..recvs).map(|_| None).collect();
            let r = region.remote();
            let info = TargetInfo { addr: r.addr, rkey: r.rkey.get(), len: len as u32 };
            qp.accept(&info.to_bytes()).expect("accept");
            for c in cmd_rx {
                match c {
                    Cmd::Read(off, n) => {
                        let mut b = vec![0; n];
                        region.read(off, &mut b).unwrap();
                        reply_tx.send(Reply::Bytes(b)).unwrap();
                    }
                    Cmd::Write(off, data) => {
                        region.write(off, &data).unwrap();
                        reply_tx.send(Reply::Bytes(Vec::new())).unwrap();
                    }
                    Cmd::ReadRecv(i, n) => {
                        if let Some(p) = pending[i].take() {
                            let b = p.reclaim(&qp).unwrap_or_else(|_| {
                                panic!("receive {i} read before its completion was reaped")
                            });
                            bufs[i] = Some(b);
                        }
                        let mut b = vec![0; n];
                        bufs[i].as_ref().expect("receive buffer").read(0, &mut b).unwrap();
                        reply_tx.send(Reply::Bytes(b)).unwrap();
                    }
                    Cmd::Recv(n) => {
                        let wcs = wait(|out| qp.poll_recv(out), n);
                        reply_tx.send(Reply::Wcs(wcs)).unwrap();
                    }
                    Cmd::Quit => break,
                }
            }
        });
        ready_rx.recv_timeout(WAIT).expect("target listening");
        Target { cmd: cmd_tx, reply: reply_rx, handle: Some(handle) }
    }

    fn bytes(&self, c: Cmd) -> Vec<u8> {
        self.cmd.send(c).expect("target alive");
        match self.reply.recv_timeout(WAIT).expect("target reply") {
            Reply::Bytes(b) => b,
            Reply::Wcs(_) => unreachable!(),
        }
    }

    /// The target's bytes `[off, off + n)`.
    pub fn read(&self, off: usize, n: usize) -> Vec<u8> {
        self.bytes(Cmd::Read(off, n))
    }

    /// Copy `data` into the target's bytes at `off`.
    pub fn write(&self, off: usize, data: &[u8]) {
        self.bytes(Cmd::Write(off, data.to_vec()));
    }

    /// The bytes of receive buffer `i` (its completion must have been reaped by
    /// [`recv`](Self::recv): the buffer comes back from its `Pending` only then).
    pub fn read_recv(&self, i: usize, n: usize) -> Vec<u8> {
        self.bytes(Cmd::ReadRecv(i, n))
    }

    /// Wait for `n` receive completions.
    pub fn recv(&self, n: usize) -> Vec<Completion> {
        self.cmd.send(Cmd::Recv(n)).expect("target alive");
        match self.reply.recv_timeout(WAIT + Duration::from_secs(5)).expect("target reply") {
            Reply::Wcs(w) => w,
            Reply::Bytes(_) => unreachable!(),
        }
    }
}

impl Target {
    /// Leave the target thread running (it waits for a connection that will not come).
    pub fn detach(mut self) {
        let _ = self.handle.take();
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.cmd.send(Cmd::Quit);
        // A failed test leaves the target where it is (it may wait for a connection that will
        // never come); a passing one checks that the target finished cleanly.
        if !std::thread::panicking() {
            if let Some(h) = self.handle.take() {
                h.join().expect("target thread");
            }
        }
    }
}

/// Run `body` as a passive end on its own thread: listen on `ip:port`, take one connection
/// request and hand its [`Conn`] to `body` (which creates its queue pair and regions, posts
/// what it needs and accepts). Returns once it listens; join the handle for `body`'s result.
pub fn passive<T, F>(ip: &str, port: u16, body: F) -> JoinHandle<T>
where
    T: Send + 'static,
    F: FnOnce(&Conn) -> T + Send + 'static,
{
    let (ready_tx, ready_rx) = channel::<()>();
    let ip = ip.to_string();
    let h = std::thread::spawn(move || {
        let l = Listener::bind(&ip, port).expect("listen");
        ready_tx.send(()).unwrap();
        let conn = l.get_request().expect("get_request");
        body(&conn)
    });
    ready_rx.recv_timeout(WAIT).expect("passive end listening");
    h
}

/// The active end's connection, resolved and ready for regions and a queue pair.
pub fn resolve(ip: &str, port: u16) -> Conn {
    Conn::resolve(ip, port).expect("resolve")
}

/// The target's buffer as announced in the accept's private data.
pub fn remote_of(conn: &Conn) -> (RemoteBuf, u32) {
    let info = TargetInfo::from_bytes(&conn.peer_data()).expect("target info");
    (RemoteBuf::new(info.addr, Rkey(info.rkey)), info.len)
}

/// A deterministic byte pattern.
pub fn pattern(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Compare byte strings, reporting the first difference instead of both strings.
pub fn same_bytes(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
    panic!(
        "{what}: {} bytes, {} expected; first difference at byte {i}: {:?} vs {:?}",
        got.len(),
        want.len(),
        got.get(i),
        want.get(i)
    );
}
