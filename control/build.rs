//! Compiles `schema/proto` into the gRPC messages and services (pure Rust: no `protoc` to install)
//! and keeps the descriptor set for server reflection.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../schema/proto");
    let files = [
        "lerian/streaming/v1/subscriptions.proto",
        "lerian/streaming/v1/catalog.proto",
        "lerian/streaming/v1/events.proto",
        "lerian/streaming/v1/deliveries.proto",
        "lerian/streaming/v1/admin.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    let fds = protox::compile(files, [&root])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
