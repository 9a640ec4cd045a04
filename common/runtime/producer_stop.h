// Stop requests for the producer loops (private to libstoker): the process's signal flag, set on
// SIGINT/SIGTERM once stoker_producer_run was asked to handle signals, and the caller's own flag
// (stoker_client_options.stop). The stream loop (producer.c) and the dataset loop
// (producer_dataset.c) both read them here, so neither reaches into the other.
#ifndef PRODUCER_STOP_H
#define PRODUCER_STOP_H

// Sets the signal flag on SIGINT and SIGTERM (stoker_process_on_stop).
void producer_stop_on_signals(void);

// Whether a stop was asked: by a signal, or through user (borrowed; may be NULL).
int producer_stop_requested(const volatile int *user);

#endif
