//! The `spillway` binary: everything lives in the library; this only runs the command line.

fn main() -> std::process::ExitCode {
    spillway::cli::main()
}
