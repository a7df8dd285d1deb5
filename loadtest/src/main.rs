//! `loadtest`: the command benchmarkers run. It produces CloudEvents to Kafka the way Lerian's
//! producers do, runs the hub on the chosen store as a child process on loopback, follows how fast
//! records become durable, measures the raw rdkafka consume rate of the same topic in the same run,
//! checks the hub's counters exactly, and writes `report.json`, `report.md` and SVG plots.
//!

mod broker_latency;
mod cql_requests;
mod cycle_kinds;
mod deliver;
mod faults;
mod floor;
mod http_target;
mod hub;
mod kafka;
mod machine;
mod profile;
mod receiver;
mod report;
mod run;
mod scenario;
mod sched;
mod sinks;
mod svg;
mod tally;
mod workload;

use std::path::PathBuf;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "loadtest",
    about = "Load test the Streaming Hub and write a report"
)]
struct Cli {
    /// A built-in scenario (ingest-backlog, steady, burst, hot-tenant, deliver-backlog,
    /// deliver-steady, slow-destination, failing-destination, many-tenants, pending-million,
    /// pull-one-reader, scale-out, shared-destination) or a TOML file.
    #[arg(long, default_value = "steady")]
    scenario: String,
    /// The store the hub runs on.
    #[arg(long, value_enum, default_value = "embedded")]
    store: hub::StoreChoice,
    /// Kafka bootstrap servers (loopback).
    #[arg(long, default_value = "127.0.0.1:9092")]
    kafka: String,
    /// CQL contact point, for --store cql.
    #[arg(long, default_value = "127.0.0.1:9042")]
    cql: String,
    /// The hub binary; default: `streaming-hub` next to this binary.
    #[arg(long)]
    hub_bin: Option<PathBuf>,
    /// Report directory; default `loadtest/reports/<scenario>-<store>`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Overrides the scenario's record count.
    #[arg(long)]
    records: Option<u64>,
    /// Overrides a steady scenario's rate (records per second).
    #[arg(long)]
    rate: Option<u64>,
    /// How long the load's Kafka producer may wait to fill a batch (`linger.ms`). Latency counts
    /// from the send, so it includes this wait; 5 ms in every report before this option.
    #[arg(long, default_value_t = 5)]
    producer_linger_ms: u64,
    /// Overrides a steady scenario's duration (seconds).
    #[arg(long)]
    duration: Option<u64>,
    /// Seed of the workload's random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Measure only the delivery baseline: the raw loopback HTTP POST rate (32 keep-alive
    /// clients, 512-byte bodies, 5 s) against this tool's own webhook receiver, and exit.
    #[arg(long)]
    http_baseline: bool,
    /// Where the load goes: `kafka` (default) or `http` (the hub's `/ingest/<source>`; steady
    /// scenarios only).
    #[arg(long, value_enum, default_value = "kafka")]
    target: run::Target,
    /// A hub setting for this run, `KEY=VALUE` (e.g. `STREAMING_HUB_DELIVERY_WORKERS=32`);
    /// repeatable. The report's command line records it.
    #[arg(long = "hub-env")]
    hub_env: Vec<String>,
    /// The sink of a delivery scenario's subscriptions: `webhook` (default; this tool's
    /// receivers), `rabbitmq` (the local broker), `sqs` (moto) or `pull` (readers of
    /// `GET /v1/subscriptions/:id/events`). Each is measured next to the raw rate of the same
    /// client against the same service.
    #[arg(long, value_enum, default_value = "webhook")]
    sink: sinks::SinkChoice,
    /// A fault run instead of a load run (issue 19), during the scenario (a delivery backlog to
    /// webhooks): `kill-9:<times>` (SIGKILL the engine, restart it), `kafka-outage:<seconds>` or
    /// `cassandra-outage:<seconds>` (stop the service, start it again); checks that nothing is
    /// lost. Report: `loadtest/reports/faults/<fault>-<scenario>-<store>/`.
    #[arg(long)]
    fault: Option<faults::Fault>,
    /// Engines of one consumer group on one CQL keyspace (issue 18; `--store cql`). The report
    /// gives each one's share of the work and its CPU per delivered event.
    #[arg(long, default_value_t = 1)]
    engines: usize,
    /// Record a perf profile of the hub over the measured phase (at most 10 s; DWARF call
    /// stacks) and draw it as `flame.svg` beside the report, whose text gets each thread's share
    /// and the functions the samples stopped in. Needs `perf` and inferno (`scripts/loadtest`
    /// installs inferno when given this flag).
    #[arg(long)]
    profile: bool,
    /// Count the hub's wake-ups over the measured phase (`perf stat`: `io_uring_enter`,
    /// `membarrier`, `futex`, syncs, writes, context switches; at most 10 s), per second and per
    /// event, without `--profile`'s samples. Needs only `perf`.
    #[arg(long)]
    count_wakes: bool,
    /// Delete other `lerian.streaming.*` topics on the broker first (a fresh hub group would
    /// ingest them too).
    #[arg(long)]
    delete_other_topics: bool,
    /// Let the load's threads (receivers, producers, clients) preempt the hub as any woken
    /// thread may; by default they run under `SCHED_BATCH`, standing in for other machines
    /// (`sched.rs`). For comparing with the reports from before the default.
    #[arg(long)]
    load_may_preempt: bool,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(floor::CHILD_FLAG) {
        // The floor probe: this binary again, in a process of its own (`floor.rs`).
        return floor::child_main(&args[2..]);
    }
    let cli = Cli::parse();
    if !cli.load_may_preempt {
        // Before any thread starts: the runtime's workers and librdkafka's threads inherit it.
        sched::stand_aside();
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(load_test(cli))
}

async fn load_test(cli: Cli) -> anyhow::Result<()> {
    if cli.http_baseline {
        let receivers = receiver::Receivers::start(Default::default()).await?;
        let rate = receiver::raw_post_rate(
            &receivers.url("baseline"),
            32,
            std::time::Duration::from_secs(5),
            512,
        )
        .await?;
        #[allow(clippy::print_stdout)] // the tool's one-line result is its output
        {
            println!("raw loopback HTTP POST rate to the receiver: {rate:.0} POSTs/s (32 clients, 512-byte bodies, 5 s)");
        }
        return Ok(());
    }
    let mut scenario = scenario::Scenario::load(&cli.scenario)?;
    if let Some(n) = cli.records {
        scenario.records = n;
    }
    if let Some(r) = cli.rate {
        // The description names the scenario's own rate: say what this run offered instead.
        scenario.description = format!(
            "{} This run: {r} events/s (`--rate`, instead of the scenario's {}).",
            scenario.description, scenario.rate
        );
        scenario.rate = r;
    }
    if let Some(d) = cli.duration {
        scenario.duration_s = d;
    }
    scenario.validate()?;
    let out = cli.out.clone().unwrap_or_else(|| {
        let store = match cli.store {
            hub::StoreChoice::Embedded => "embedded",
            hub::StoreChoice::Cql => "cql",
        };
        let sink = match cli.sink {
            sinks::SinkChoice::Webhook => String::new(),
            other => format!("-{}", other.label()),
        };
        PathBuf::from(format!("loadtest/reports/{}{sink}-{store}", scenario.name))
    });
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let args = run::RunArgs {
        scenario,
        store: cli.store,
        kafka: cli.kafka,
        cql: cli.cql,
        hub_bin: cli.hub_bin.unwrap_or_else(hub::default_bin),
        seed: cli.seed,
        producer_linger_ms: cli.producer_linger_ms,
        delete_other_topics: cli.delete_other_topics,
        target: cli.target,
        hub_env: cli
            .sink
            .hub_env()
            .into_iter()
            .chain(
                cli.hub_env
                    .iter()
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_owned(), v.to_owned())),
            )
            .collect(),
        sink: cli.sink,
        engines: cli.engines.max(1),
        profile: (cli.profile || cli.count_wakes).then(|| profile::Wanted {
            dir: out.clone(),
            samples: cli.profile,
        }),
        command,
    };
    if let Some(wanted) = &args.profile {
        profile::tools_ready(wanted)?;
    }
    anyhow::ensure!(
        args.engines == 1 || matches!(cli.fault, None | Some(faults::Fault::KillEngine)),
        "--fault with several engines is kill-engine:1 (the others are the engine tests' \
         `scale_out`)"
    );
    if args.store == hub::StoreChoice::Cql {
        hub::fresh_keyspace(&args.cql).await?;
    }
    if let Some(fault) = cli.fault {
        return fault_run(args, fault, cli.out).await;
    }
    // Boxed: the whole run is one large future (every sink's client state).
    let report = Box::pin(run::run(args)).await?;
    report.write(&out)?;
    #[allow(clippy::print_stdout)] // the tool's one-line result is its output
    {
        println!(
        "{} on {:?} via {:?}: hub {:.0} records/s durable, {} {:.0}/s (×{:.2}); max lag {}; RSS peak {:.0} MiB; checks {}. Report: {}",
        report.scenario.name,
        report.store,
        report.target,
        report.hub.durable_rate,
        if report.baseline.raw_post_rate.is_some() { "raw POST" } else { "raw consume" },
        report.baseline.raw_post_rate.unwrap_or(report.baseline.raw_consume_rate),
        report.hub.durable_rate
            / report
                .baseline
                .raw_post_rate
                .unwrap_or(report.baseline.raw_consume_rate)
                .max(1e-9),
        report.hub.max_lag_records,
        report.hub.rss_kib_peak as f64 / 1024.0,
        if report.passed() { "all exact" } else { "MISMATCH" },
        out.join("report.md").display()
    );
    }
    anyhow::ensure!(
        report.passed(),
        "the hub's counters do not match what was produced"
    );
    Ok(())
}

/// `--fault`: the fault run and its report.
async fn fault_run(
    args: run::RunArgs,
    fault: faults::Fault,
    out: Option<PathBuf>,
) -> anyhow::Result<()> {
    let store = format!("{:?}", args.store).to_lowercase();
    let out = out.unwrap_or_else(|| {
        PathBuf::from(format!(
            "loadtest/reports/faults/{}-{}-{store}",
            fault.slug(),
            args.scenario.name
        ))
    });
    let report = Box::pin(faults::run(args, fault)).await?;
    report.write(&out)?;
    #[allow(clippy::print_stdout)] // the tool's one-line result is its output
    {
        println!(
            "{} during {}: {} of {} delivered, lost {}, duplicates {} (bound {} per injection); {}. Report: {}",
            report.fault,
            report.scenario,
            report.unique_delivered,
            report.expected_deliveries,
            report.lost,
            report.duplicates,
            report.duplicate_bound_per_kill,
            if report.passed { "passed" } else { "FAILED" },
            out.join("report.md").display()
        );
    }
    anyhow::ensure!(
        report.passed,
        "the fault run failed: {}",
        report.failures.join("; ")
    );
    Ok(())
}
