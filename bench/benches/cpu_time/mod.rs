//! CPU time as criterion's measure: every thread of the bench's process, so the work a
//! measured call hands to other threads (a store's flush thread, a woken shard) counts too.

use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::Throughput;

/// The process's CPU time (every thread: the engines' own flush threads count), where the
/// wall time of a synced commit is mostly waiting for the disk. The kernel's own threads (the
/// journal) are not counted.
pub struct CpuTime;

/// The time every thread of this process has run, from `/proc/self/task/*/schedstat` (ns).
fn process_cpu() -> Duration {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    let nanos: u64 = tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(nanos)
}

impl Measurement for CpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        process_cpu()
    }
    fn end(&self, started: Duration) -> Duration {
        process_cpu().saturating_sub(started)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, d: &Duration) -> f64 {
        d.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuMicros
    }
}

/// CPU time in microseconds; throughput in elements per CPU-second.
struct CpuMicros;

impl ValueFormatter for CpuMicros {
    fn scale_values(&self, _typical: f64, values: &mut [f64]) -> &'static str {
        values.iter_mut().for_each(|v| *v /= 1e3);
        "µs cpu"
    }
    fn scale_throughputs(
        &self,
        _typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let per = match throughput {
            Throughput::Elements(n) | Throughput::Bytes(n) | Throughput::BytesDecimal(n) => {
                *n as f64
            }
        };
        values.iter_mut().for_each(|v| *v = per * 1e9 / *v);
        "elem/cpu-s"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}
