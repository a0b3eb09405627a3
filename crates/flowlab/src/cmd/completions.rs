//! `flowlab completions SHELL` and `flowlab man`: shell completions and manual pages,
//! generated from the parser's own definitions so they cannot drift from it.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args as ClapArgs;
use clap_complete::Shell;

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The shell to complete for: bash, zsh, fish, elvish or powershell.
    pub shell: Shell,
}

/// Prints the completion script of command line `cmd` for `a.shell` (install:
/// docs/cli.md).
pub fn run(a: &Args, mut cmd: clap::Command) -> anyhow::Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "flowlab", &mut script);
    std::io::stdout().write_all(&script)?;
    Ok(())
}

#[derive(Debug, ClapArgs)]
pub struct ManArgs {
    /// Write flowlab.1 and a page per command (flowlab-test.1, flowlab-net-up.1, …) into
    /// DIR instead of printing flowlab.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Prints flowlab(1) for command line `cmd`, or writes every page into `a.dir`.
pub fn man(a: &ManArgs, cmd: clap::Command) -> anyhow::Result<()> {
    // No page for clap's `help` command (as generate_to leaves it out).
    let cmd = cmd.disable_help_subcommand(true);
    match &a.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(cmd, dir)
                .with_context(|| format!("cannot write the pages into {}", dir.display()))?;
            println!("wrote the manual pages into {}", dir.display());
        }
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut page)?;
            std::io::stdout().write_all(&page)?;
        }
    }
    Ok(())
}
