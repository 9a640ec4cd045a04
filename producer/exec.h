// The `exec` generator: runs a user's command through /bin/sh -c and reads examples from its
// standard output, as text lines or little-endian records (a variable-length field: its length
// in rows first, then its rows; docs/schema.md). The child's stderr passes
// through; its stdin is /dev/null (a dataset's: the indices it is asked for). It does not restart a
// command that ends, and it does not interpret anything but numbers: the schema given by the user
// says what each line holds.
#ifndef PRODUCER_EXEC_H
#define PRODUCER_EXEC_H

#include <stddef.h>
#include <sys/types.h>

#include "stoker/generator.h"
#include "stoker/schema.h"

typedef enum exec_format {
    // One example per line: the numbers of all fields in schema order, separated by spaces, tabs
    // or commas. Blank lines are skipped. Integer fields take integers (or integral decimals such
    // as "3.0") in their dtype's range; float fields take anything strtod reads.
    EXEC_TEXT = 0,
    // Fixed-size records of stoker_schema_example_bytes(schema) bytes: the fields in schema order,
    // each stoker_field_bytes long, elements little-endian. A variable-length field is a uint32
    // length in rows, then its rows; in text, its length, then its rows' numbers.
    EXEC_RAW = 1,
} exec_format;

// Parses "text" or "raw"; STOKER_INVALID otherwise (*out untouched).
int exec_format_parse(const char *name, exec_format *out);

// Starts cmd (borrowed; copied) as `/bin/sh -c cmd` in its own process group and sets up out so
// that each fill reads one example from it in schema (borrowed; copied) order. The child gets
// SIGTERM if the thread that created it dies (PR_SET_PDEATHSIG), so create it from the thread
// that lives as long as the producer.
// Returns STOKER_OK; STOKER_INVALID for a bad schema or format; STOKER_IO if the pipe or fork
// fails; STOKER_NOMEM. On failure a message is written into err (if err != NULL) and *out is
// untouched.
//
// The fill callback blocks until a whole example has arrived. It returns STOKER_END_OF_DATA when
// the child closed its output after whole examples and exited with status 0; STOKER_IO (message
// logged, e.g. "exec: command 'x' exited with status 127") when it exited otherwise or was killed;
// STOKER_INVALID (message logged, naming the line or record and what was expected) for a malformed
// line or a short record; STOKER_INTERRUPTED within ~10 ms of stoker_producer_stop_flag() being
// set (SIGINT/SIGTERM, with the producer's handlers) while it waits for the child, which is not
// sticky. Nothing is written into fields unless it returns STOKER_OK. After an error or the end,
// every later call returns the same code. seq and seed are ignored: the child decides what it
// sends.
//
// The destroy callback (stoker_generator_fini) closes the child's output, sends SIGTERM to its
// process group, waits up to 1 s, then sends SIGKILL and reaps it: no child is left behind.
int exec_generator_create(const char *cmd, const stoker_schema *schema, exec_format format,
                          stoker_generator *out, char *err, size_t err_len);

// As exec_generator_create, for a dataset of n_items (> 0) items (docs/datasets.md): the child's
// stdin is a pipe, and for each item the producer writes one line "INDEX SEED" (decimal; SEED is
// the item's seed for this epoch, for augmentation) and reads the item's example from its
// output. A child that ends or fails instead of answering fails the producer with STOKER_IO (its
// items go to other producers). The fingerprint says only n_items: what the items are is the
// child's business (commands may differ between boxes).
int exec_generator_create_dataset(const char *cmd, const stoker_schema *schema, exec_format format,
                                  uint64_t n_items, stoker_generator *out, char *err,
                                  size_t err_len);

// The child's pid (its process group id too), or -1 once it has been reaped; for tests and logs.
pid_t exec_generator_pid(const stoker_generator *gen);

#endif
