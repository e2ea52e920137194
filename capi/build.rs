//! Build script: gives the shared library its soname.
//!
//! While the major version is 0 every minor release may break the ABI, so the soname carries
//! the minor version (`libllmsession.so.0.1`); from 1.0 on it is `libllmsession.so.MAJOR`.
//! Only ELF targets get a soname; the Makefile installs the matching file names.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_default();
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").unwrap_or_default();
    let elf = matches!(os.as_str(), "linux" | "android" | "freebsd" | "netbsd" | "openbsd" | "dragonfly");
    if elf {
        let soname = if major == "0" { format!("libllmsession.so.0.{minor}") } else { format!("libllmsession.so.{major}") };
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    }
}
