//! The control plane of the standalone hub (R-OP-1): built from `STREAMING_HUB_*` with its
//! embedded control store and generated key material in the hub's data directory, and handed to
//! the engine as the parts it takes (`hub_engine::hub::InProcessControl`).

use std::path::Path;

use hub_control::config::ControlConfig;
use hub_engine::delivery::control_link::ControlLink;
use hub_engine::hub::InProcessControl;

/// Builds the control plane on `tokio` (its background refreshes run there).
pub fn control_in_process(
    tokio: &tokio::runtime::Runtime,
    data_dir: &Path,
) -> anyhow::Result<InProcessControl> {
    let config = ControlConfig::from_env(|k| std::env::var(k).ok())?;
    let (control, verifier) = tokio.block_on(config.build(data_dir))?;
    Ok(InProcessControl {
        link: ControlLink {
            store: control.store.clone(),
            keyring: control.keyring.clone(),
            sinks: control.sinks.clone(),
            events: control.events.clone(),
            outcomes: control.outcomes.clone(),
            partners: control.partners.clone(),
            prober: control.clone(),
        },
        catalog: control.catalog.clone(),
        reader: control.reader.clone(),
        local_index: control.local_index.clone(),
        routes: hub_control::http::router(control, verifier.clone()),
        verifier,
    })
}
