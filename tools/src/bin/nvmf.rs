//! `nvmf`: nvme-cli's fabrics and I/O commands over this project's NVMe/RDMA host
//! library (see `rdma_tools::nvmf` and docs/nvmf-cli.md).
//!
//! ```text
//! nvmf discover -t rdma -a 192.168.77.10 -s 4420 -o json
//! nvmf id-ctrl -t rdma -a 192.168.77.10 -n nqn.2026-11.io.example:ref -o json
//! nvmf write -a 192.168.77.10 -n NQN --start-block 0 -c 7 -d data.bin
//! nvmf read  -a 192.168.77.10 -n NQN --start-block 0 -c 7 > back.bin
//! nvmf connect -a 192.168.77.10 -n NQN &      # holds until SIGINT/SIGTERM
//! nvmf list; nvmf list-subsys -o json; nvmf disconnect -n NQN
//! ```
use std::process::ExitCode;

use clap::Parser;
use rdma_tools::nvmf::{args::Cli, run, status::EXIT_FAILURE};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // Help and version exit 0; a bad flag exits 1, as nvme-cli's do.
            let code = if e.use_stderr() { EXIT_FAILURE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match run::run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            match &e {
                run::CliError::Nvme { .. } => eprintln!("{e}"),
                run::CliError::Other(m) => eprintln!("nvmf: {m}"),
            }
            ExitCode::from(EXIT_FAILURE)
        }
    }
}
