//! What the Linux kernel's `mlx5_core` and `mlx5_ib` (6.12) ask of the firmware, one behaviour
//! per test, each naming the kernel function or PRM rule it follows.

use super::*;
use crate::fw::CommandRecord;

/// Kernel 6.12 `mlx5_query_board_id` and `mlx5_core_query_vendor_id` (`fw.c`): both read
/// `QUERY_ADAPTER`'s parameter block (the PSID from `vsd_contd_psid`, the vendor from
/// `ieee_vendor_id`) right after `INIT_HCA`.
#[test]
fn query_adapter_answers_the_vendor_and_a_psid() {
    let mut d = up();
    let out = d.ok(&input(Opcode::QueryAdapter, 0, 16), ifc::query_adapter_out::SIZE);
    use ifc::query_adapter_out as o;
    assert_eq!(o::IEEE_VENDOR_ID.get(&out), 0x0002c9, "Mellanox's OUI");
    assert_eq!(o::VSD_VENDOR_ID.get(&out), 0x15b3, "Mellanox's PCI vendor id");
    let psid = o::VSD_CONTD_PSID.slice(&out);
    let text: Vec<u8> = psid.iter().copied().take_while(|b| *b != 0).collect();
    assert!(text.starts_with(b"MT_") && text.len() <= 16, "{text:?}");
    assert!(psid[text.len()..].iter().all(|b| *b == 0), "NUL padded");
    let vsd = o::VSD.slice(&out);
    assert!(vsd.iter().all(|b| b.is_ascii_graphic() || *b == b' ' || *b == 0));
    // A short output buffer (the kernel sizes it from the header) is refused as such.
    let (st, _) = d.status(&input(Opcode::QueryAdapter, 0, 16), 16);
    assert_eq!(st, CmdStatus::BadOutputLen);
}

/// Before `ENABLE_HCA` the function answers nothing but `ENABLE_HCA` (kernel `main.c`
/// issues `QUERY_ADAPTER` only after `INIT_HCA`).
#[test]
fn query_adapter_needs_an_enabled_function() {
    let mut d = Dev::new(FwConfig::default());
    let (st, _) = d.status(&input(Opcode::QueryAdapter, 0, 16), ifc::query_adapter_out::SIZE);
    assert_eq!(st, CmdStatus::BadSysState);
}

/// `Model::command_log` counts what ran by opcode, op_mod and status; `Model::fw_pages`
/// counts the pages given and reclaimed through `MANAGE_PAGES`.
#[test]
fn command_log_and_page_counts_follow_the_commands() {
    let mut d = Dev::new(FwConfig::default());
    assert!(d.model.command_log().is_empty());
    assert_eq!(d.model.fw_pages(), (0, 0));
    d.up();
    let log = d.model.command_log();
    let find = |log: &[CommandRecord], op: Opcode, op_mod: u16, st: CmdStatus| {
        log.iter()
            .find(|r| r.opcode == op && r.op_mod == op_mod && r.status == st)
            .map_or(0, |r| r.count)
    };
    assert_eq!(find(&log, Opcode::EnableHca, 0, CmdStatus::Ok), 1);
    assert_eq!(find(&log, Opcode::QueryPages, u16::from(PagesStage::Boot), CmdStatus::Ok), 1);
    assert_eq!(find(&log, Opcode::InitHca, 0, CmdStatus::Ok), 1);
    let given = (d.fw.pages().total_given, 0);
    assert!(given.0 >= 20, "boot + init pages: {given:?}");
    assert_eq!(d.model.fw_pages(), given);
    // A refused command is counted under its status.
    d.status(&input(Opcode::InitHca, 0, 16), 16);
    d.status(&input(Opcode::InitHca, 0, 16), 16);
    let log = d.model.command_log();
    assert_eq!(find(&log, Opcode::InitHca, 0, CmdStatus::BadSysState), 2);
    assert_eq!(find(&log, Opcode::InitHca, 0, CmdStatus::Ok), 1);
    let total: u64 = log.iter().map(|r| r.count).sum();
    assert_eq!(total as usize, d.fw.executed().len());
    // Teardown, then every page back.
    d.set_roce(false);
    d.ok(&input(Opcode::TeardownHca, 0, 16), 16);
    let back = d.take(64);
    assert_eq!(d.model.fw_pages(), (given.0, back.len() as u64));
    assert_eq!(back.len() as u64, given.0, "every page comes back after TEARDOWN_HCA");
}
