//! `ozaki`: run programs under the shim and study what their BLAS calls do.
//!
//! Each subcommand lives in its own module with a `main(args) -> anyhow::Result<ExitCode>`
//! that parses its own arguments (clap), so subcommands stay independent of each other.
//! This file only dispatches; errors print with their context chain and exit 2.

use std::process::ExitCode;

mod ab_report;
mod accuracy;
mod bench;
mod calibrate;
mod env;
mod explain;
mod fortran_dgemm;
mod launcher;
mod preload;
mod progress;
mod replay;
mod report;
mod run;
mod summary;
mod tracefile;

/// One subcommand: its name, a one-line summary for `ozaki --help`, and its entry point.
struct Subcommand {
    name: &'static str,
    about: &'static str,
    main: fn(Vec<String>) -> anyhow::Result<ExitCode>,
}

const SUBCOMMANDS: &[Subcommand] = &[
    Subcommand {
        name: "run",
        about: "run a program with the shim preloaded, then summarise its BLAS calls",
        main: run::main,
    },
    Subcommand {
        name: "env",
        about: "the variables that preload the shim, for mpirun -x / srun --export",
        main: env::main,
    },
    Subcommand {
        name: "summary",
        about: "calls, GFLOP, time and call-size statistics of one or more traces",
        main: summary::main,
    },
    Subcommand {
        name: "explain",
        about: "predicted time of every route for one call shape, and the choice",
        main: explain::main,
    },
    Subcommand {
        name: "replay",
        about: "replay a trace through the engine for this or another machine",
        main: replay::main,
    },
    Subcommand {
        name: "calibrate",
        about: "measure this machine and write its engine profile",
        main: calibrate::main,
    },
    Subcommand {
        name: "bench",
        about: "GPU benchmarks: ours vs cuBLAS native, cuBLAS emulation and NVBLAS",
        main: bench::main,
    },
    Subcommand {
        name: "ab-report",
        about: "A/B comparison of routes against the vendor BLAS from a trace",
        main: ab_report::main,
    },
    Subcommand {
        name: "accuracy",
        about: "adversarial accuracy suite: emulated vs native fp64 error, exact reference",
        main: accuracy::main,
    },
    Subcommand {
        name: "report",
        about: "HTML report with plots from one or more traces",
        main: report::main,
    },
];

fn print_help() {
    println!(
        "ozaki {}: fp64 GEMM on tensor cores for programs that never heard of it",
        env!("CARGO_PKG_VERSION")
    );
    println!();
    println!("Usage: ozaki <COMMAND> [ARGS]...   (ozaki <COMMAND> --help for details)");
    println!();
    println!("Commands:");
    for s in SUBCOMMANDS {
        println!("  {:<10} {}", s.name, s.about);
    }
    println!();
    println!("Example: ozaki run --trace app.jsonl -- python3 my_script.py");
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().collect();
    let Some(name) = args.get(1).cloned() else {
        print_help();
        return ExitCode::from(2);
    };
    if matches!(name.as_str(), "-h" | "--help" | "help") {
        // `ozaki help CMD` is `ozaki CMD --help`.
        match args.get(2).filter(|_| name == "help") {
            Some(sub) if SUBCOMMANDS.iter().any(|s| s.name == sub.as_str()) => {
                args = vec![args[0].clone(), sub.clone(), "--help".into()];
            }
            _ => {
                print_help();
                return ExitCode::SUCCESS;
            }
        }
    }
    let name = args[1].clone();
    if matches!(name.as_str(), "-V" | "--version") {
        println!("ozaki {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    let Some(cmd) = SUBCOMMANDS.iter().find(|s| s.name == name) else {
        eprintln!("ozaki: unknown command {name:?}; try `ozaki --help`");
        return ExitCode::from(2);
    };
    // clap sees "ozaki <command>" as the program name.
    args.remove(0);
    args[0] = format!("ozaki {}", cmd.name);
    match (cmd.main)(args) {
        Ok(code) => code,
        Err(e) => {
            // `--help` and `--version` reach here as clap "errors": they are answers.
            if let Some(clap) = e.downcast_ref::<clap::Error>()
                && matches!(
                    clap.kind(),
                    clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
                )
            {
                let _ = clap.print();
                return ExitCode::SUCCESS;
            }
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("ozaki {}: error: {e:#}", cmd.name);
            ExitCode::from(2)
        }
    }
}
