//! Compiles bpf/accel.bpf.c with clang when clang is on PATH; otherwise (or when clang
//! fails, e.g. without libbpf-dev's headers) the checked-in bpf/accel.bpf.o is embedded, so a
//! build needs no C toolchain. `WARDEN_ACCEL_CLANG` names another clang, or `none` to use the
//! checked-in object even where clang is installed.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    // One cfg for "can load BPF": the `ebpf` feature on a Linux target.
    println!("cargo::rustc-check-cfg=cfg(warden_ebpf)");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    if linux && std::env::var_os("CARGO_FEATURE_EBPF").is_some() {
        println!("cargo:rustc-cfg=warden_ebpf");
    }
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it")).join("accel.bpf.o");
    let source = dir.join("bpf/accel.bpf.c");
    let checked_in = dir.join("bpf/accel.bpf.o");
    println!("cargo:rerun-if-changed={}", source.display());
    println!("cargo:rerun-if-changed={}", checked_in.display());
    println!("cargo:rerun-if-env-changed=PATH");
    println!("cargo:rerun-if-env-changed=WARDEN_ACCEL_CLANG");
    let built = match compile(&dir, &source, &out) {
        Ok(()) => "clang",
        Err(why) => {
            if why != "clang is not on PATH" && why != "WARDEN_ACCEL_CLANG=none" {
                println!("cargo:warning=warden-accel: {why}; using the checked-in bpf/accel.bpf.o");
            }
            std::fs::copy(&checked_in, &out).expect("bpf/accel.bpf.o is checked in");
            "checked-in"
        }
    };
    if built == "clang" && std::fs::read(&out).ok() != std::fs::read(&checked_in).ok() {
        println!(
            "cargo:warning=warden-accel: bpf/accel.bpf.o differs from what clang built from \
             accel.bpf.c; refresh it: cp {} {}",
            out.display(),
            checked_in.display()
        );
    }
    println!("cargo:rustc-env=WARDEN_ACCEL_OBJECT_FROM={built}");
}

fn compile(dir: &Path, source: &Path, out: &Path) -> Result<(), String> {
    let clang = std::env::var("WARDEN_ACCEL_CLANG").unwrap_or_else(|_| "clang".into());
    if clang == "none" {
        return Err("WARDEN_ACCEL_CLANG=none".into());
    }
    let on_path = Path::new(&clang).is_file()
        || std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(&clang).is_file()))
            .unwrap_or(false);
    if !on_path {
        return Err("clang is not on PATH".into());
    }
    // The multiarch include directory holds asm/types.h, which linux/bpf.h needs.
    let multiarch = format!(
        "/usr/include/{}-linux-gnu",
        std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into())
    );
    let result = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        // Paths out of the debug info: the object is the same from any checkout.
        .arg(format!("-fdebug-prefix-map={}=.", dir.display()))
        .arg(format!("-I{multiarch}"))
        .arg("-c")
        .arg(source)
        .arg("-o")
        .arg(out)
        .output()
        .map_err(|e| format!("cannot run clang: {e}"))?;
    if result.status.success() {
        Ok(())
    } else {
        Err(format!(
            "clang failed: {}",
            String::from_utf8_lossy(&result.stderr).trim()
        ))
    }
}
