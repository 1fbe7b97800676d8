//! Injected faults: a failing command, a command that never completes, firmware stuck in
//! `initializing`, a fatal health syndrome.

use super::*;

#[test]
fn a_chosen_command_fails_with_the_chosen_status() {
    let mut d = up();
    d.fw.fail_next(Opcode::AllocPd, CmdStatus::NoResources, 0x1234_5678);
    assert_eq!(d.status(&input(Opcode::AllocPd, 0, 16), 16), (CmdStatus::NoResources, 0x1234_5678));
    assert!(d.model.shared().dev().pds.is_empty(), "the failed command did nothing");
    // One-shot: the next one executes; other opcodes were never affected.
    d.alloc_pd();
    assert_eq!(d.model.shared().dev().pds.len(), 1);
    let last = *d.fw.executed().last().unwrap();
    assert_eq!((last.opcode, last.status), (Opcode::AllocPd, CmdStatus::Ok));
    // A failure injected into the bring-up itself.
    let mut d = Dev::new(FwConfig::default());
    d.fw.fail_next(Opcode::EnableHca, CmdStatus::InternalError, 7);
    assert_eq!(d.status(&input(Opcode::EnableHca, 0, 16), 16), (CmdStatus::InternalError, 7));
    assert_eq!(d.fw.state(), crate::fw::HcaState::Disabled);
    d.simple(Opcode::EnableHca, 0);
    // A bring-up that fails after the boot pages unwinds as the kernel's error path does:
    // take the pages back, disable.
    d.satisfy(PagesStage::Boot);
    d.fw.fail_next(Opcode::QueryHcaCap, CmdStatus::InternalError, 9);
    let q = input(Opcode::QueryHcaCap, 1, 16);
    assert_eq!(d.status(&q, ifc::query_hca_cap_out::SIZE), (CmdStatus::InternalError, 9));
    assert_eq!(d.take(64).len(), 4);
    d.simple(Opcode::DisableHca, 0);
    assert_eq!(d.fw.pages().held, 0);
}

#[test]
fn a_hung_command_keeps_its_slot_while_others_complete() {
    let mut d = up();
    d.fw.hang_next(Opcode::AllocPd);
    let p = d.post(3, &input(Opcode::AllocPd, 0, 16), 16, Tweak::default());
    assert_eq!(d.wait(p.slot, Duration::from_millis(200)), None, "ownership never returns");
    assert_eq!(d.fw.hung_slots(), vec![3]);
    // Other slots keep working, including the same opcode.
    let pd = d.alloc_pd();
    assert!(d.model.shared().dev().pds.contains(&pd));
    assert_eq!(d.model.shared().dev().pds.len(), 1, "the hung command did not run");
    // Ringing the hung slot again does not run it either.
    d.bar.write_be32(seg::CMD_DBELL, 1 << 3);
    assert_eq!(d.wait(3, Duration::from_millis(100)), None);
}

#[test]
fn firmware_stuck_in_initializing_ignores_doorbells() {
    let mut d = Dev::new(FwConfig::default());
    d.fw.set_stuck_initializing(true);
    assert_ne!(d.bar.read_be32(seg::INITIALIZING) & seg::INITIALIZING_BIT, 0);
    std::thread::sleep(Duration::from_millis(20));
    assert_ne!(d.bar.read_be32(seg::INITIALIZING) & seg::INITIALIZING_BIT, 0, "stays set");
    let p = d.post(0, &input(Opcode::EnableHca, 0, 16), 16, Tweak::default());
    assert_eq!(d.wait(p.slot, Duration::from_millis(200)), None);
    assert_eq!(d.fw.state(), crate::fw::HcaState::Disabled);
    d.fw.set_stuck_initializing(false);
    assert_eq!(d.bar.read_be32(seg::INITIALIZING) & seg::INITIALIZING_BIT, 0);
    // The driver must ring again; then the command runs.
    d.bar.write_be32(seg::CMD_DBELL, 1);
    assert_eq!(d.wait(0, WAIT), Some(0));
    assert_eq!(d.fw.state(), crate::fw::HcaState::Enabled);
}

#[test]
fn a_health_syndrome_is_fatal_until_cleared() {
    let mut d = up();
    d.fw.set_health_syndrome(0x8, 0xbeef);
    let w = d.bar.read_be32(seg::HEALTH_IRISC_INDEX);
    assert_eq!(((w >> 16) & 0xff, w & 0xffff), (0x8, 0xbeef));
    let c1 = d.bar.read_be32(seg::HEALTH_COUNTER);
    let c2 = d.bar.read_be32(seg::HEALTH_COUNTER);
    assert_eq!(c1, c2, "a dead firmware's health counter stands still");
    let p = d.post(0, &input(Opcode::AllocPd, 0, 16), 16, Tweak::default());
    assert_eq!(d.wait(p.slot, Duration::from_millis(200)), None);
    d.fw.set_health_syndrome(0, 0);
    assert_eq!(d.bar.read_be32(seg::HEALTH_IRISC_INDEX), 0);
    assert_ne!(d.bar.read_be32(seg::HEALTH_COUNTER), c2);
    d.bar.write_be32(seg::CMD_DBELL, 1);
    assert_eq!(d.wait(0, WAIT), Some(0));
    assert_eq!(d.model.shared().dev().pds.len(), 1);
}

#[test]
fn a_slow_firmware_completes_late() {
    let mut d = up();
    d.fw.set_command_delay(Duration::from_millis(300));
    let start = Instant::now();
    let p = d.post(0, &input(Opcode::AllocPd, 0, 16), 16, Tweak::default());
    assert_eq!(d.wait(p.slot, Duration::from_millis(100)), None, "not yet");
    assert_eq!(d.wait(p.slot, WAIT), Some(0));
    assert!(start.elapsed() >= Duration::from_millis(300));
    d.fw.set_command_delay(Duration::ZERO);
    d.alloc_pd();
    assert_eq!(d.model.shared().dev().pds.len(), 2);
}
