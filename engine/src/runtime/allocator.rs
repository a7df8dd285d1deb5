//! The process's allocator: mimalloc, for the hub's own code and — through its `override`
//! feature — for the C libraries linked in (librdkafka above all), so one heap serves both and
//! one policy returns what they free.
//!
//! Why (issue 17, a million-record backlog, `loadtest/reports/README.md`): with librdkafka on
//! glibc's `malloc`, its freed fetch buffers stayed in glibc's arenas (125 MiB in two arenas at
//! the end of ingest) where the hub's indexes could not reuse them; mimalloc's own default
//! purge delay (a second) kept freed memory resident past the end of ingest; and transparent huge
//! pages made every 2 MiB of heap the hub touched resident whole (an idle hub: 68 MiB RSS with
//! them, 39 without).

use std::ffi::c_long;

use libmimalloc_sys::{mi_option_get, mi_option_set_default, mi_option_t};

/// mimalloc's options the hub sets, by their number in `mimalloc.h`'s option enum (v3; the
/// `-sys` crate names only the options older versions shared).
const PURGE_DELAY: mi_option_t = 15;
const ALLOW_THP: mi_option_t = 43;

/// How long freed memory stays resident before it goes back to the kernel: a tenth of a
/// second, where mimalloc's default is a second. Immediate purging (0) cost 20–25 % more CPU
/// in ingest (an `madvise` per freed page run); a tenth of a second cost nothing measurable.
const PURGE_DELAY_MS: c_long = 100;

/// Sets the hub's allocator defaults: the purge delay above, and no transparent huge pages. An
/// operator's `MIMALLOC_PURGE_DELAY` or `MIMALLOC_ALLOW_THP` still wins: mimalloc read those when
/// the process started, and a default does not replace them.
#[allow(unsafe_code)]
pub fn tune() {
    // SAFETY: `mi_option_set_default` only stores a number in mimalloc's option table; any
    // thread may call it at any time.
    unsafe {
        mi_option_set_default(PURGE_DELAY, PURGE_DELAY_MS);
        mi_option_set_default(ALLOW_THP, 0);
    }
    if !huge_pages_allowed() {
        // mimalloc asked for huge pages on the heap it reserved before `main` (madvise), so the
        // option alone would not undo that: the process-wide flag does, for every page the
        // kernel backs from now on. A kernel that refuses it leaves huge pages on (only memory).
        // SAFETY: `prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0)` takes no pointers; it sets one flag
        // of this process.
        let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
}

/// Whether mimalloc may use transparent huge pages (only if an operator asked for them).
#[allow(unsafe_code)]
fn huge_pages_allowed() -> bool {
    // SAFETY: reads mimalloc's option table.
    unsafe { mi_option_get(ALLOW_THP) != 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The purge delay in force, as mimalloc reads it.
    #[allow(unsafe_code)]
    fn purge_delay_ms() -> c_long {
        // SAFETY: reads mimalloc's option table.
        unsafe { mi_option_get(PURGE_DELAY) }
    }

    /// Whether the kernel's THP-disable flag is set for this process.
    #[allow(unsafe_code)]
    fn thp_disabled() -> bool {
        // SAFETY: `prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0)` takes no pointers and only reads.
        unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1 }
    }

    #[test]
    fn r_op_3_the_allocator_purges_after_a_tenth_of_a_second_without_huge_pages() {
        // The option numbers are mimalloc's: if one named another option, what is read back
        // would not be the value mimalloc documents as its default.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some()
            || std::env::var_os("MIMALLOC_ALLOW_THP").is_some()
        {
            return;
        }
        assert_eq!(
            purge_delay_ms(),
            1000,
            "mimalloc v3's default, before tune()"
        );
        assert!(huge_pages_allowed(), "mimalloc v3's default, before tune()");
        tune();
        assert_eq!(purge_delay_ms(), PURGE_DELAY_MS);
        assert!(!huge_pages_allowed());
        assert!(thp_disabled(), "the process's own flag");
    }
}
