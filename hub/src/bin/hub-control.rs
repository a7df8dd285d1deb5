//! `hub-control`: the control plane as its own process (`serve`: `streaming_hub::control_process`),
//! and `token`, which mints an Access Manager-shaped token for local use with a standalone hub
//! (same data directory) or a deployment sharing `STREAMING_HUB_JWT_HS256_SECRET`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use hub_control::config::{now_ms, ControlConfig};

#[derive(Debug, Parser)]
#[command(name = "hub-control", about = "Streaming Hub control plane")]
struct Cli {
    /// Data directory (the embedded control store and generated key material).
    #[arg(long, env = "STREAMING_HUB_DATA_DIR", default_value = ".hub-data")]
    data_dir: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve /v1 over REST, GraphQL and gRPC, with /health, /ready and /metrics.
    Serve {
        #[arg(
            long,
            env = "STREAMING_HUB_CONTROL_ADDR",
            default_value = "127.0.0.1:8081"
        )]
        addr: SocketAddr,
    },
    /// Print a bearer token for a tenant, signed with the hub's HS256 secret.
    Token {
        #[arg(long)]
        tenant: String,
        #[arg(
            long,
            default_value = "subscriptions:get,subscriptions:post,subscriptions:patch,subscriptions:delete"
        )]
        permissions: String,
        #[arg(long, default_value = "local-user")]
        subject: String,
        #[arg(long, default_value_t = 3600)]
        ttl_s: u64,
        /// A partner's token, as the gateway relays it (R-CP-17: the `partner_id` claim).
        #[arg(long)]
        partner: Option<String>,
        /// A producer's token for HTTP ingest (R-SEC-4): the sources it may write,
        /// comma-separated (`*` for all); give it `--permissions ingest`.
        #[arg(long)]
        sources: Option<String>,
    },
}

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    hub_engine::runtime::allocator::tune();
    hub_control::config::init_logs(hub_control::config::LogTo::Stderr)?;
    let cli = Cli::parse();
    let config = ControlConfig::from_env(|k| std::env::var(k).ok())?;
    match cli.command {
        Command::Serve { addr } => streaming_hub::control_process::run(&cli.data_dir, addr)?,
        Command::Token {
            tenant,
            permissions,
            subject,
            ttl_s,
            partner,
            sources,
        } => {
            let secret = config.hs256_secret(&cli.data_dir)?;
            let perms: Vec<&str> = permissions.split(',').map(str::trim).collect();
            let now = u64::try_from(now_ms() / 1000).unwrap_or(0);
            let mint = hub_control::auth::Mint {
                issuer: &config.issuer,
                audience: &config.audience,
                subject: &subject,
                tenant: &tenant,
                permissions: &perms,
                ttl_s,
                now_s: now,
            };
            let token = match sources {
                Some(sources) => {
                    let sources: Vec<&str> = sources.split(',').map(str::trim).collect();
                    hub_control::auth::mint_hs256_ingest(secret.as_bytes(), &mint, &sources)?
                }
                None => {
                    hub_control::auth::mint_hs256_for(secret.as_bytes(), &mint, partner.as_deref())?
                }
            };
            #[allow(clippy::print_stdout)] // the command's output
            {
                println!("{token}");
            }
        }
    }
    Ok(())
}
