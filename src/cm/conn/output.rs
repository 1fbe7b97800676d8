//! MADs out: a connection's outstanding MAD and its retry timer, the answers that wait
//! for room in the port's send queue (in order, each with the event it holds back), and the
//! last MADs of freed connections. A full queue never loses what a state machine needs:
//! it is kept and sent first on the next poll, or dropped and counted where the peer's own
//! retries recover it.

use crate::cm::backend::{MadAddr, MadPort};
use crate::cm::mad::MAD_LEN;
use crate::cm::types::*;
use crate::error::Error;

use super::{Answer, Cm, Tx, ANSWERS, FINALS};

impl<P: MadPort, const N: usize, const E: usize> Cm<P, N, E> {
    /// One send: only a hard error counts as `send_errors`; a full queue is the caller's to
    /// keep or drop.
    pub(super) fn send(&mut self, to: &MadAddr, mad: &[u8; MAD_LEN]) -> Tx {
        match self.port.send_mad(to, mad) {
            Ok(()) => {
                self.stats.sent += 1;
                Tx::Sent
            }
            Err(Error::QueueFull { .. }) => Tx::Full,
            Err(_) => {
                self.stats.send_errors += 1;
                Tx::Failed
            }
        }
    }

    /// Send an answer that no connection keeps (to a MAD that matched none, or to a peer's
    /// retry): dropped and counted when the queue is full; the peer's next retry gets one.
    pub(super) fn send_or_drop(&mut self, to: &MadAddr, mad: &[u8; MAD_LEN]) {
        if self.send(to, mad) == Tx::Full {
            self.stats.send_dropped += 1;
        }
    }

    /// The last MAD of a connection being freed: kept among the finals when the queue is
    /// full, dropped and counted when they are full too.
    pub(super) fn send_final(&mut self, to: &MadAddr, mad: &[u8; MAD_LEN]) {
        if self.finals.iter().all(Option::is_none) && self.send(to, mad) != Tx::Full {
            return;
        }
        match self.finals.iter_mut().find(|f| f.is_none()) {
            Some(f) => {
                *f = Some((*to, *mad));
                self.stats.send_deferred += 1;
            }
            None => self.stats.send_dropped += 1,
        }
    }

    /// Make `out` the connection's outstanding MAD, in `state`, with all its retries, and
    /// send it (`ib_send_cm_req`, `_rep`, `_dreq` posting with `max_cm_retries`).
    pub(super) fn arm(&mut self, slot: usize, out: [u8; MAD_LEN], state: ConnState, now: Micros) {
        let Some(c) = self.slots[slot].conn.as_mut() else { return };
        c.out = out;
        c.state = state;
        c.retries_left = c.max_cm_retries;
        self.send_out(slot, now);
    }

    /// Send (or send again) the connection's `out` and start its timer, one try's timeout;
    /// if the queue is full it waits, sent first on the next poll. The timer runs either
    /// way, so a queue that stays full ends the connection within its retries, as a lost
    /// MAD would.
    pub(super) fn send_out(&mut self, slot: usize, now: Micros) {
        let Some(c) = self.slots[slot].conn.as_mut() else { return };
        c.deadline = Some(now.plus_ms(c.timeout_ms));
        let (to, mad) = (c.peer, c.out);
        let full = self.send(&to, &mad) == Tx::Full;
        if full {
            self.stats.send_deferred += 1;
        }
        if let Some(c) = self.slots[slot].conn.as_mut() {
            c.out_unsent = full;
        }
    }

    /// Send an answer for a connection, and raise `event` once it left. Answers leave in
    /// order: one waits behind those already waiting. When the queue is full the answer is
    /// kept with its event (see [`Cm::keep`]).
    pub(super) fn answer(
        &mut self,
        slot: usize,
        to: MadAddr,
        mad: [u8; MAD_LEN],
        event: Option<EventKind>,
        now: Micros,
    ) {
        let waiting = self.slots[slot].conn.as_ref().is_some_and(|c| c.answers[0].is_some());
        if !waiting && self.send(&to, &mad) != Tx::Full {
            if let Some(k) = event {
                self.push_event(self.id_of(slot), k);
            }
            return;
        }
        self.stats.send_deferred += 1;
        self.keep(slot, Answer { mad: Some((to, mad)), event }, now);
    }

    /// Raise `kind` for a live connection, behind the events its waiting answers hold (so
    /// that events come in the order things happened).
    pub(super) fn conn_event(&mut self, slot: usize, kind: EventKind, now: Micros) {
        let waiting = self.slots[slot].conn.as_ref().is_some_and(|c| c.answers[0].is_some());
        if !waiting && self.ev_len < E {
            self.push_event(self.id_of(slot), kind);
            return;
        }
        self.keep(slot, Answer { mad: None, event: Some(kind) }, now);
    }

    /// Keep an answer (or an event behind answers) in its connection. The connection gets a
    /// deadline (one try's timeout) if it had none, so that nothing is held for ever. When
    /// the connection's answers are full, one without an event gives way (dropped, counted);
    /// failing that (never with the states' answers: at most an RTU and a DREP hold events)
    /// the MAD is dropped and its event raised now.
    pub(super) fn keep(&mut self, slot: usize, new: Answer, now: Micros) {
        let id = self.id_of(slot);
        let Some(c) = self.slots[slot].conn.as_mut() else { return };
        if c.deadline.is_none() {
            c.deadline = Some(now.plus_ms(c.timeout_ms));
        }
        if let Some(a) = c.answers.iter_mut().find(|a| a.is_none()) {
            *a = Some(new);
            return;
        }
        if let Some(i) = c.answers.iter().position(|a| a.is_some_and(|a| a.event.is_none())) {
            c.answers.copy_within(i + 1.., i);
            c.answers[ANSWERS - 1] = Some(new);
            self.stats.send_dropped += 1;
            return;
        }
        self.stats.send_dropped += new.mad.is_some() as u64;
        if let Some(k) = new.event {
            self.push_event(id, k);
        }
    }

    /// Send what waits for room in the port's queue, oldest first: the finals, then each
    /// connection's `out` and answers. Stops at the first send the queue refuses; a
    /// connection's answers wait while the event ring has no room for the next one's event.
    pub(super) fn flush(&mut self) {
        for i in 0..FINALS {
            let Some((to, mad)) = self.finals[i] else { continue };
            if self.send(&to, &mad) == Tx::Full {
                return;
            }
            self.finals[i] = None;
        }
        for slot in 0..N {
            let Some(c) = self.slots[slot].conn.as_ref() else { continue };
            if c.out_unsent {
                let (to, mad) = (c.peer, c.out);
                if self.send(&to, &mad) == Tx::Full {
                    return;
                }
                if let Some(c) = self.slots[slot].conn.as_mut() {
                    c.out_unsent = false;
                }
            }
            while let Some(a) = self.slots[slot].conn.as_ref().and_then(|c| c.answers[0]) {
                if a.event.is_some() && self.ev_len == E {
                    break;
                }
                if let Some((to, mad)) = a.mad {
                    if self.send(&to, &mad) == Tx::Full {
                        return;
                    }
                }
                self.pop_answer(slot);
            }
        }
    }

    /// Take the oldest waiting answer of a slot and raise its event (the ring has room).
    pub(super) fn pop_answer(&mut self, slot: usize) {
        let id = self.id_of(slot);
        let Some(c) = self.slots[slot].conn.as_mut() else { return };
        let first = c.answers[0].take();
        c.answers.copy_within(1.., 0);
        c.answers[ANSWERS - 1] = None;
        // The last one gone: a state with no timer of its own drops the answers' deadline.
        let idle =
            matches!(c.state, ConnState::ReqRcvd | ConnState::MraReqSent | ConnState::Established);
        if idle && c.answers[0].is_none() {
            c.deadline = None;
        }
        if let Some(k) = first.and_then(|a| a.event) {
            self.push_event(id, k);
        }
    }

    /// The connection's time ran out with answers still waiting: drop them (counted) and
    /// raise the events they held, as the event ring has room. True once none is left and
    /// the ring still has room for one more event.
    pub(super) fn drop_answers(&mut self, slot: usize) -> bool {
        while let Some(a) = self.slots[slot].conn.as_ref().and_then(|c| c.answers[0]) {
            if a.event.is_some() && self.ev_len == E {
                return false;
            }
            self.stats.send_dropped += a.mad.is_some() as u64;
            self.pop_answer(slot);
        }
        self.ev_len < E
    }
}
