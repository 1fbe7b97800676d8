//! `cargo xtask ifc [--header PATH] [--check]`: regenerate the mlx5 command layout constants
//! (`drivers/mlx5/src/layout/ifc/generated.rs`) from the kernel's `mlx5_ifc.h`, or with `--check` fail
//! if the committed file differs from what the header gives.

use std::path::PathBuf;

#[path = "../../drivers/mlx5/ifc/gen.rs"]
mod gen;

const OUT: &str = "drivers/mlx5/src/layout/ifc/generated.rs";

pub fn run(args: &[String]) -> bool {
    let mut header = None;
    let mut check = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--header" => header = it.next().map(PathBuf::from),
            "--check" => check = true,
            other => {
                eprintln!("ifc: unknown argument `{other}` (usage: ifc [--header PATH] [--check])");
                return false;
            }
        }
    }
    let Some(header) = header.or_else(gen::find_header) else {
        eprintln!(
            "ifc: mlx5_ifc.h not found; install linux-headers-amd64 or pass --header PATH \
             (or set MLX5_IFC_H)"
        );
        return false;
    };
    let text = match gen::Header::load(&header).and_then(|h| gen::generate(&h)) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("ifc: {}: {e}", header.display());
            return false;
        }
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = root.join(OUT);
    if check {
        let same = std::fs::read_to_string(&out).is_ok_and(|old| old == text);
        if same {
            println!("ifc: {OUT} matches {}", header.display());
        } else {
            eprintln!("ifc: {OUT} is stale; run `cargo xtask ifc`");
        }
        return same;
    }
    if let Err(e) = std::fs::write(&out, text) {
        eprintln!("ifc: {}: {e}", out.display());
        return false;
    }
    println!("ifc: wrote {OUT} from {}", header.display());
    true
}
