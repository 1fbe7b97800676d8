//! Random command bytes (a fixed-seed xorshift, so failures reproduce): whatever the driver
//! sends, the firmware answers every command with a status, never stops, and still executes a
//! well-formed command afterwards.

use super::*;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn random_inputs_always_get_an_answer() {
    for seed in [0x9e37_79b9_7f4a_7c15, 0x0123_4567_89ab_cdef, 0x5eed] {
        fuzz(seed, 1000);
    }
}

fn fuzz(seed: u64, rounds: usize) {
    let mut d = up();
    let uar = d.alloc_uar();
    let (eqn, _) = d.create_eq(uar, 6, &[EventType::Cmd]);
    let pd = d.alloc_pd();
    let cq = d.create_cq(uar, eqn, 5);
    d.create_qp(pd, cq, uar);
    let ops: Vec<Opcode> = Opcode::HEADER.iter().map(|(_, v)| Opcode::from(*v as u16)).collect();
    let mut rng = XorShift(seed);
    let mut statuses = std::collections::BTreeSet::new();
    for _ in 0..rounds {
        let op = ops[rng.below(ops.len() as u64) as usize];
        let len = [16, 32, 272, 600, 4112][rng.below(5) as usize];
        let mut inp: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        // Mostly small numbers in the first words, where indices and sizes live.
        for b in inp.iter_mut().take(16).skip(8) {
            *b &= 0x03;
        }
        ifc::cmd_in::OPCODE.set(&mut inp, u64::from(u16::from(op)));
        let outlen = [16, 48, 272, 4112][rng.below(4) as usize];
        let (delivery, out) = d.run(rng.below(32) as u32, &inp, outlen, Tweak::default());
        assert_eq!(delivery, DeliveryStatus::Ok);
        statuses.insert(ifc::cmd_out::STATUS.get(&out));
    }
    eprintln!("seed {seed:#x}: statuses {statuses:x?}");
    assert!(statuses.len() > 5, "the inputs reached several checks: {statuses:?}");
    assert!(d.fw.delivery_errors().is_empty());
    // Still alive and serving.
    d.ok(&input(Opcode::Nop, 0, 16), 16);
}
