//! The facts a report needs to be reproducible: machine, commit, command.

use std::process::Command;

#[derive(Debug, Clone, serde::Serialize)]
pub struct Machine {
    pub cpu_model: String,
    pub cpus: usize,
    pub memory_gib: f64,
    pub kernel: String,
}

fn first_line_with(path: &str, prefix: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find(|l| l.starts_with(prefix))
        .map(str::to_owned)
}

pub fn machine() -> Machine {
    let cpu_model = first_line_with("/proc/cpuinfo", "model name")
        .and_then(|l| l.split_once(':').map(|(_, v)| v.trim().to_owned()))
        .unwrap_or_else(|| "unknown".into());
    let memory_gib = first_line_with("/proc/meminfo", "MemTotal")
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    Machine {
        cpu_model,
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        memory_gib: (memory_gib * 10.0).round() / 10.0,
        kernel,
    }
}

/// The checked-out commit, with `-dirty` when the tree has changes.
pub fn commit() -> String {
    let run = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let head = run(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        run(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty {
        format!("{head}-dirty")
    } else {
        head
    }
}

/// Wall-clock Unix ms (end-to-end latency is measured against the hub's receipt time).
#[allow(clippy::disallowed_methods)] // the load test's clock read
pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
