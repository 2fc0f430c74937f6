//! The `spillway` binary: everything is in the library; this only picks the allocator.

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    spillway::cli::main()
}
