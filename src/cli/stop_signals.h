// Stopping any command on a signal without leaving its files behind; stopping training at a step
// boundary without losing work.
//
// Note [Stopping on a signal]
// main installs the handlers first: SIGINT, SIGTERM, SIGHUP and SIGPIPE (a reader that closed
// our pipe) stop any command. Until train's loop runs, a signal stops at once: the handler
// unlinks the scratch files (Note [Scratch files]: a store being made, an output's temporary
// file), writes one line and _exits 128+N. In the loop, the first one is polled at the next step
// boundary: a checkpoint when configured, the resume hint, 128+N, the store removed on the way
// out. A second one stops at once as above; a repeated SIGPIPE never does (every write to the
// closed pipe raises one, and the write just fails with EPIPE). A crash or abort unlinks them
// too, then takes the signal's default action. SIGKILL cannot be caught: the next run takes the
// leftover store over (Note [One run per store file]). Why so: docs/design.md §10.
#pragma once

namespace strata::cli {

// Installs the handlers (SA_RESTART, so interrupted system calls resume). Idempotent.
void install_stop_signals();
// From now on the first signal is only recorded, for stop_signal() at a step boundary.
void stop_at_step_boundaries();
// 0, or the first signal received since stop_at_step_boundaries; SIGPIPE once a write to stderr
// failed with EPIPE (stderr_closed in core/log.h).
int stop_signal();
// "SIGINT", "SIGTERM", ... for messages; async-signal-safe.
const char* signal_name(int sig);

}  // namespace strata::cli
