//! `streaming-hub`: the standalone hub (engine on the embedded store, HTTP ingest, Kafka when
//! `STREAMING_HUB_KAFKA_BROKERS` is set). Usage: `streaming-hub [--config <file.toml>]`.

use hub_engine::config::HubConfig;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    hub_engine::runtime::allocator::tune();
    hub_control::config::init_logs(hub_control::config::LogTo::Stdout)?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let file = match args.as_slice() {
        [] => None,
        [flag, path] if flag == "--config" => Some(std::path::PathBuf::from(path)),
        _ => anyhow::bail!("usage: streaming-hub [--config <file.toml>]"),
    };
    let config = HubConfig::load(file.as_deref())?;
    let data_dir = config.data_dir.clone();
    hub_engine::hub::run_standalone(config, |tokio| {
        streaming_hub::standalone::control_in_process(tokio, &data_dir)
    })
}
