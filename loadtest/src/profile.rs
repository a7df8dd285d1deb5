//! A profile of the hub over a run's measured phase (`--profile`, issue 17): `perf record` with
//! DWARF call stacks on the hub process, folded by `inferno-collapse-perf` and drawn by
//! `inferno-flamegraph` into `flame.svg` beside the report. The report gets the shares that need
//! no picture: each thread's part of the samples, what the cycles were doing by kind
//! (`cycle_kinds`), and the functions the samples stopped in.
//!
//! Beside it, `perf stat` counts the hub's wake-ups over the same window: the syscalls a
//! shard's reactor makes to sleep and wake (`io_uring_enter`, `membarrier`), the other threads'
//! (`futex`), the syncs, and the context switches — at a steady rate the hub's cost follows them.
//!
//! `--count-wakes` takes only those counts (no samples, no inferno): a light run to compare two
//! builds' wake-ups per event, with `perf` alone.
//!
//! `scripts/loadtest --profile …` installs inferno into the tool cache; `perf` is the system's.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

/// Samples per second per core: enough for a few thousand stacks over a phase of seconds, few
/// enough that `perf script` unwinds them in under a minute.
const FREQUENCY: u32 = 499;
/// The longest a profile records: DWARF stacks cost 8 KiB a sample on disk.
const MOST: Duration = Duration::from_secs(10);
/// How many of the functions samples stopped in the report lists.
const TOP: usize = 15;
/// What `perf stat` counts beside the samples.
const COUNTED: [&str; 7] = [
    "syscalls:sys_enter_io_uring_enter",
    "syscalls:sys_enter_membarrier",
    "syscalls:sys_enter_futex",
    "syscalls:sys_enter_fdatasync",
    "syscalls:sys_enter_write",
    "syscalls:sys_enter_pwrite64",
    "context-switches",
];

/// What the report says of a profile.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileFigures {
    pub seconds: f64,
    /// Cycles the samples stand for (perf's period), the unit of every share.
    pub cycles: u64,
    /// The flame graph's file, beside the report; none when only counts were taken.
    pub svg: Option<String>,
    pub command: String,
    /// Each thread (by name, digits folded: `shard-0` and `shard-1` stay apart, `tokio-runtime-
    /// worker` is one) and its share of the samples, largest first.
    pub threads: Vec<Share>,
    /// The functions the samples stopped in (self time), largest first.
    pub functions: Vec<Share>,
    /// What the cycles were doing, by kind (`cycle_kinds`).
    pub kinds: Vec<Share>,
    /// Syscalls and context switches over the same window (`perf stat`).
    pub counted: Vec<Counted>,
}

impl ProfileFigures {
    /// What `--count-wakes` gives: `perf stat`'s counts over `seconds`, no samples to share.
    fn counts_alone(seconds: f64, command: String, counted: Vec<Counted>) -> Self {
        Self {
            seconds,
            cycles: 0,
            svg: None,
            command,
            threads: Vec::new(),
            functions: Vec::new(),
            kinds: Vec::new(),
            counted,
        }
    }
}

/// A thread's or a function's part of the profile, in the cycles its samples stand for.
#[derive(Debug, Clone, Serialize)]
pub struct Share {
    pub name: String,
    pub cycles: u64,
}

/// How many times an event happened over the profiled window (`perf stat`).
#[derive(Debug, Clone, Serialize)]
pub struct Counted {
    pub name: String,
    pub count: u64,
}

/// What a run asked to take of the hub over its measured phase, and where it goes.
#[derive(Debug, Clone)]
pub struct Wanted {
    /// The report's directory.
    pub dir: PathBuf,
    /// Samples and a flame graph (`--profile`) beside the counts, or the counts alone
    /// (`--count-wakes`).
    pub samples: bool,
}

/// Says what is missing before a run starts, rather than after it.
pub fn tools_ready(wanted: &Wanted) -> anyhow::Result<()> {
    let (flag, tools): (_, &[&str]) = if wanted.samples {
        (
            "--profile",
            &["perf", "inferno-collapse-perf", "inferno-flamegraph"],
        )
    } else {
        ("--count-wakes", &["perf"])
    };
    for &tool in tools {
        let found = Command::new(tool)
            .arg("--help")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        anyhow::ensure!(
            found,
            "{flag} needs `{tool}` on PATH (perf is the system's: linux-perf; \
             scripts/loadtest --profile installs inferno)"
        );
    }
    Ok(())
}

/// `perf stat`, and `perf record` when samples were asked for, running on the hub.
pub struct Profiling {
    perf: Option<Child>,
    stat: Child,
    data: PathBuf,
    dir: PathBuf,
    started: Instant,
    command: String,
}

impl Profiling {
    /// Starts counting (and recording, if asked) process `pid`; what is kept goes to `dir`.
    pub fn start(pid: u32, wanted: &Wanted) -> anyhow::Result<Self> {
        let dir = wanted.dir.as_path();
        std::fs::create_dir_all(dir)?;
        let data = dir.join("perf.data");
        let window = MOST.as_secs().to_string();
        let record_args = [
            "record",
            "-F",
            &FREQUENCY.to_string(),
            "--call-graph",
            "dwarf",
            "-p",
            &pid.to_string(),
            "-o",
            &data.display().to_string(),
            "--",
            "sleep",
            &window,
        ]
        .map(str::to_owned);
        let stat_args = [
            "stat",
            "-x",
            ",",
            "-o",
            &dir.join("perf-stat.csv").display().to_string(),
            "-e",
            &COUNTED.join(","),
            "-p",
            &pid.to_string(),
            "--",
            "sleep",
            &window,
        ]
        .map(str::to_owned);
        let perf = wanted
            .samples
            .then(|| perf_quietly(&record_args))
            .transpose()?;
        let stat = perf_quietly(&stat_args)?;
        eprintln!("[loadtest] profiling the hub (perf, pid {pid})");
        let shown = if wanted.samples {
            record_args
        } else {
            stat_args
        };
        Ok(Self {
            perf,
            stat,
            data,
            dir: dir.to_owned(),
            started: Instant::now(),
            command: format!("perf {}", shown.join(" ")),
        })
    }

    /// Stops counting and recording, draws `flame.svg` and counts the shares. The raw data is
    /// removed.
    pub fn finish(mut self) -> anyhow::Result<ProfileFigures> {
        let seconds = self.started.elapsed().min(MOST).as_secs_f64();
        for perf in self.perf.iter_mut().chain([&mut self.stat]) {
            if perf.try_wait()?.is_none() {
                // perf writes its data out on SIGINT.
                Command::new("kill")
                    .args(["-INT", &perf.id().to_string()])
                    .status()?;
            }
            perf.wait()?;
        }
        let stat_file = self.dir.join("perf-stat.csv");
        let counted = counts(&std::fs::read_to_string(&stat_file).unwrap_or_default());
        let _ = std::fs::remove_file(stat_file);
        if self.perf.is_none() {
            let command = std::mem::take(&mut self.command);
            return Ok(ProfileFigures::counts_alone(seconds, command, counted));
        }
        eprintln!("[loadtest] folding the profile's stacks (perf script, inferno)");
        let script = Command::new("perf")
            .args(["script", "-i"])
            .arg(&self.data)
            .stderr(Stdio::null())
            .output()?;
        anyhow::ensure!(script.status.success(), "perf script failed");
        let folded = pipe("inferno-collapse-perf", &[], &script.stdout)?;
        let svg = pipe(
            "inferno-flamegraph",
            &["--title", "Streaming Hub, measured phase"],
            &folded,
        )?;
        std::fs::write(self.dir.join("flame.svg"), svg)?;
        // The folded stacks stay for reading with grep (not committed: `.gitignore`).
        std::fs::write(self.dir.join("stacks.folded"), &folded)?;
        let _ = std::fs::remove_file(&self.data);
        let folded = String::from_utf8_lossy(&folded);
        let (cycles, threads, functions) = shares(&folded);
        Ok(ProfileFigures {
            seconds,
            cycles,
            svg: Some("flame.svg".to_owned()),
            command: std::mem::take(&mut self.command),
            threads,
            functions,
            kinds: crate::cycle_kinds::kinds(&folded),
            counted,
        })
    }
}

/// Starts `perf` with `args`, its output out of the run's way.
fn perf_quietly(args: &[String]) -> std::io::Result<Child> {
    Command::new("perf")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// A run that fails part-way stops its profiler too.
impl Drop for Profiling {
    fn drop(&mut self) {
        for perf in self.perf.iter_mut().chain([&mut self.stat]) {
            if let Ok(None) = perf.try_wait() {
                let _ = perf.kill();
                let _ = perf.wait();
            }
        }
    }
}

/// `perf stat -x ,` lines (`count,unit,event,…`) as counts by event, in `COUNTED`'s order.
fn counts(csv: &str) -> Vec<Counted> {
    let mut found: HashMap<&str, u64> = HashMap::new();
    for line in csv.lines().filter(|l| !l.starts_with('#')) {
        let mut fields = line.split(',');
        let (Some(count), Some(_unit), Some(event)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if let Ok(n) = count.parse::<u64>() {
            found.insert(event, n);
        }
    }
    COUNTED
        .iter()
        .filter_map(|e| {
            found.get(e).map(|n| Counted {
                name: e.trim_start_matches("syscalls:sys_enter_").to_owned(),
                count: *n,
            })
        })
        .collect()
}

/// The report's section: the picture's link, how it was made, and the shares.
pub fn section(p: &ProfileFigures, events_per_s: Option<f64>) -> String {
    use std::fmt::Write as _;
    let mut md = String::new();
    let pct = |n: u64| 100.0 * n as f64 / p.cycles.max(1) as f64;
    let Some(svg) = &p.svg else {
        let _ = writeln!(
            md,
            "## The hub's wake-ups (perf stat)\n\nCounted over {:.1} s of the measured phase, \
             without samples (`--count-wakes`): `{}`.\n",
            p.seconds, p.command
        );
        counts_table(&mut md, p, events_per_s);
        md.push('\n');
        return md;
    };
    let _ = writeln!(
        md,
        "## Where the hub's CPU went (perf)\n\n[Flame graph]({svg}) of the hub over {:.1} s of \
         the measured phase, sampled {FREQUENCY} times a second per core, each sample weighed by \
         the cycles it stands for: `{}`.\n\n| thread | share of cycles |\n|---|---|",
        p.seconds, p.command
    );
    for t in &p.threads {
        let _ = writeln!(md, "| `{}` | {:.1} % |", t.name, pct(t.cycles));
    }
    let _ = writeln!(md, "\n| what the cycles were doing | share |\n|---|---|");
    for k in &p.kinds {
        let _ = writeln!(md, "| {} | {:.1} % |", k.name, pct(k.cycles));
    }
    md.push('\n');
    counts_table(&mut md, p, events_per_s);
    let _ = writeln!(
        md,
        "\n| function the samples stopped in (self) | share |\n|---|---|"
    );
    for f in &p.functions {
        let _ = writeln!(
            md,
            "| `{}` | {:.1} % |",
            f.name.replace('|', "\\|"),
            pct(f.cycles)
        );
    }
    md.push('\n');
    md
}

/// The counts of `perf stat`, per second and per event.
fn counts_table(md: &mut String, p: &ProfileFigures, events_per_s: Option<f64>) {
    use std::fmt::Write as _;
    let _ = writeln!(
        md,
        "| over the same window (`perf stat`) | per second | per event at {} |\n|---|---|---|",
        events_per_s.map_or("—".to_owned(), |r| format!("{r:.0}/s"))
    );
    for c in &p.counted {
        let per_s = c.count as f64 / p.seconds.max(1e-9);
        let per_event = events_per_s
            .filter(|r| *r > 0.0)
            .map_or("—".to_owned(), |r| format!("{:.1}", per_s / r));
        let _ = writeln!(md, "| `{}` | {per_s:.0} | {per_event} |", c.name);
    }
}

/// Runs `tool` with `input` on its standard input and returns its output.
fn pipe(tool: &str, args: &[&str], input: &[u8]) -> anyhow::Result<Vec<u8>> {
    use std::io::Write;
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdin"))?;
    let input = input.to_vec();
    // Written from a thread of its own: the tool may fill its output before reading all input.
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output()?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("{tool}: writer panicked"))??;
    anyhow::ensure!(out.status.success(), "{tool} failed");
    Ok(out.stdout)
}

/// From folded stacks (`thread;outer;…;inner cycles` a line): the total cycles, each thread's share
/// and the self time of the `TOP` functions samples stopped in most.
fn shares(folded: &str) -> (u64, Vec<Share>, Vec<Share>) {
    let mut threads: HashMap<String, u64> = HashMap::new();
    let mut functions: HashMap<String, u64> = HashMap::new();
    let mut total = 0;
    for (stack, count) in samples(folded) {
        total += count;
        let mut frames = stack.split(';');
        let thread = frames.next().unwrap_or_default();
        *threads.entry(thread_kind(thread)).or_default() += count;
        let inner = stack.rsplit(';').next().unwrap_or_default();
        *functions.entry(inner.to_owned()).or_default() += count;
    }
    (total, largest(threads, usize::MAX), largest(functions, TOP))
}

/// Each line of folded stacks as its stack (`thread;outer;…;inner`) and the cycles it stands for;
/// lines that are not one are passed over.
pub fn samples(folded: &str) -> impl Iterator<Item = (&str, u64)> {
    folded.lines().filter_map(|line| {
        let (stack, count) = line.rsplit_once(' ')?;
        Some((stack, count.parse().ok()?))
    })
}

/// A thread's name with a trailing number kept only where it tells shards apart.
fn thread_kind(name: &str) -> String {
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '-' || c == '/');
    if base.contains("shard") {
        name.to_owned()
    } else {
        base.to_owned()
    }
}

fn largest(counts: HashMap<String, u64>, most: usize) -> Vec<Share> {
    let mut all: Vec<Share> = counts
        .into_iter()
        .map(|(name, cycles)| Share { name, cycles })
        .collect();
    all.sort_by(|a, b| b.cycles.cmp(&a.cycles).then_with(|| a.name.cmp(&b.name)));
    all.truncate(most);
    all
}

#[cfg(test)]
mod tests {
    use super::{counts, section, shares, Counted, ProfileFigures, Share};

    #[test]
    fn the_section_gives_threads_then_counts_per_event_then_functions() {
        let share = |name: &str, cycles| Share {
            name: name.to_owned(),
            cycles,
        };
        let p = ProfileFigures {
            seconds: 10.0,
            cycles: 200,
            svg: Some("flame.svg".to_owned()),
            command: "perf record".to_owned(),
            threads: vec![share("hub-shard-1", 150), share("log-commit", 50)],
            functions: vec![share("a|b", 20)],
            kinds: vec![share("user space", 120)],
            counted: vec![Counted {
                name: "io_uring_enter".to_owned(),
                count: 70_000,
            }],
        };
        let md = section(&p, Some(500.0));
        let at = |s: &str| md.find(s).unwrap_or_else(|| panic!("{s} missing in {md}"));
        assert!(at("| `hub-shard-1` | 75.0 % |") < at("| user space | 60.0 % |"));
        assert!(at("| user space | 60.0 % |") < at("| `io_uring_enter` | 7000 | 14.0 |"));
        assert!(at("| `io_uring_enter` | 7000 | 14.0 |") < at("| `a\\|b` | 10.0 % |"));
    }

    #[test]
    fn counts_alone_give_a_section_of_wake_ups_per_event_without_shares() {
        let p = ProfileFigures::counts_alone(
            10.0,
            "perf stat -x , -e syscalls:sys_enter_io_uring_enter".to_owned(),
            vec![Counted {
                name: "io_uring_enter".to_owned(),
                count: 57_000,
            }],
        );
        let md = section(&p, Some(500.0));
        assert!(md.starts_with("## The hub's wake-ups (perf stat)"), "{md}");
        assert!(md.contains("`perf stat -x , -e syscalls:sys_enter_io_uring_enter`"));
        assert!(md.contains("| `io_uring_enter` | 5700 | 11.4 |"), "{md}");
        assert!(!md.contains("share"), "no shares without samples: {md}");
    }

    #[test]
    fn perf_stat_lines_give_counts_in_a_fixed_order_without_comments_or_unsupported_events() {
        let csv = "# started on a day\n\n\
                   12,,context-switches,1000,100.00,,\n\
                   70504,,syscalls:sys_enter_io_uring_enter,1000,100.00,,\n\
                   <not supported>,,syscalls:sys_enter_membarrier,0,100.00,,\n";
        let c: Vec<(String, u64)> = counts(csv).into_iter().map(|s| (s.name, s.count)).collect();
        assert_eq!(
            c,
            [
                ("io_uring_enter".to_owned(), 70504),
                ("context-switches".to_owned(), 12)
            ]
        );
    }

    #[test]
    fn folded_stacks_give_each_threads_share_and_the_functions_samples_stopped_in() {
        let folded = "hub-shard-0;main;attempt;send 30\n\
                      hub-shard-1;main;attempt;send 10\n\
                      tokio-runtime-w;run;poll 5\n\
                      hub-commit;write;fdatasync 20\n\
                      not a line\n";
        let (total, threads, functions) = shares(folded);
        assert_eq!(total, 65);
        let t: Vec<(&str, u64)> = threads
            .iter()
            .map(|s| (s.name.as_str(), s.cycles))
            .collect();
        assert_eq!(
            t,
            [
                ("hub-shard-0", 30),
                ("hub-commit", 20),
                ("hub-shard-1", 10),
                ("tokio-runtime-w", 5)
            ]
        );
        assert_eq!(functions[0].name, "send");
        assert_eq!(functions[0].cycles, 40);
        assert_eq!(functions[1].name, "fdatasync");
    }
}
