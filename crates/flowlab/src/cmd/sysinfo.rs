//! `flowlab sysinfo`: this machine's network state, as every result records it.

use clap::Args as ClapArgs;
use flowlab_report::{json, table};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Print one JSON document.
    #[arg(short = 'J', long)]
    pub json: bool,
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    let info = flowlab_engine::sysinfo::collect();
    if a.json {
        println!("{}", json::document(&info)?);
    } else {
        print!("{}", table::system(&info));
    }
    Ok(())
}
