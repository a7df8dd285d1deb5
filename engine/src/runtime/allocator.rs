//! The process's allocator: mimalloc, for the hub's own code and — through its `override`
//! feature — for the C libraries linked in (librdkafka above all), so one heap serves both and
//! one purge policy returns what they free.
//!
//! Why (issue 17, a million-record backlog, `loadtest/reports/README.md`): with librdkafka on
//! glibc's `malloc`, its freed fetch buffers stayed in glibc's arenas (125 MiB in two arenas at
//! the end of ingest) where the hub's indexes could not reuse them; and mimalloc's own default
//! purge delay (a second) kept ~200 MiB freed but resident past the end of ingest.

use std::ffi::c_long;

/// mimalloc's `mi_option_purge_delay` (its option enum in `mimalloc.h`, v3; the `-sys` crate
/// names only the options older versions shared).
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays resident before it goes back to the kernel: a tenth of a
/// second, where mimalloc's default is a second. Immediate purging (0) cost 20–25 % more CPU
/// in ingest (an `madvise` per freed page run); a tenth of a second cost nothing measurable.
pub const PURGE_DELAY_MS: c_long = 100;

/// Sets the hub's allocator defaults. An operator's `MIMALLOC_*` variable still wins: mimalloc
/// read those when the process started, and a default does not replace them.
#[allow(unsafe_code)]
pub fn tune() {
    // SAFETY: `mi_option_set_default` only stores a number in mimalloc's option table; any
    // thread may call it at any time.
    unsafe { libmimalloc_sys::mi_option_set_default(PURGE_DELAY, PURGE_DELAY_MS) };
}

/// The purge delay in force, as mimalloc reads it.
#[allow(unsafe_code)]
pub fn purge_delay_ms() -> c_long {
    // SAFETY: reads mimalloc's option table.
    unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_op_3_the_allocator_purges_freed_memory_after_a_tenth_of_a_second() {
        // The option number is mimalloc's: if it named another option, the delay read back
        // would not be the one mimalloc documents as its default.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        assert_eq!(
            purge_delay_ms(),
            1000,
            "mimalloc v3's default, before tune()"
        );
        tune();
        assert_eq!(purge_delay_ms(), PURGE_DELAY_MS);
    }
}
