// Segment list of one producer's queued examples.
#include <stdlib.h>
#include <string.h>

#include "queue.h"
#include "stoker/error.h"

struct segment {
    segment *next;
    uint64_t first_seq; // seq of data example 0
    uint32_t first;     // index of the next example to take
    uint32_t end;       // one past the last example
    uint8_t *data[STOKER_MAX_FIELDS];
    stoker_request *req; // owner of data when it came from a push
    stoker_chunk copy;   // owner of data when it was copied back from a lease
};

void
queue_init(queue *q, const stoker_schema *schema)
{
    memset(q, 0, sizeof(*q));
    q->schema = schema;
}

static void
segment_free(segment *s)
{
    stoker_request_free(s->req);
    stoker_chunk_fini(&s->copy);
    free(s);
}

void
queue_fini(queue *q)
{
    segment *s = q->head;
    while (s != NULL) {
        segment *next = s->next;
        segment_free(s);
        s = next;
    }
    q->head = q->tail = NULL;
    q->examples = q->bytes = 0;
}

int
queue_append_request(queue *q, stoker_request *req, uint32_t skip)
{
    uint32_t n = req->chunk.count - skip;
    if (n == 0) {
        stoker_request_free(req);
        return STOKER_OK;
    }
    segment *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return STOKER_NOMEM;
    s->req = req;
    s->first_seq = req->first_seq;
    s->first = skip;
    s->end = req->chunk.count;
    for (uint32_t i = 0; i < q->schema->n_fields; i++)
        s->data[i] = req->chunk.data[i];
    if (q->tail != NULL)
        q->tail->next = s;
    else
        q->head = s;
    q->tail = s;
    q->examples += n;
    q->bytes += (uint64_t)n * stoker_schema_example_bytes(q->schema);
    return STOKER_OK;
}

int
queue_prepend_copy(queue *q, const stoker_chunk *src, uint32_t src_first, uint32_t count,
                   uint64_t first_seq)
{
    if (count == 0)
        return STOKER_OK;
    segment *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return STOKER_NOMEM;
    if (stoker_chunk_init(&s->copy, q->schema, count) != STOKER_OK ||
        stoker_chunk_append(&s->copy, src, src_first, count) != STOKER_OK) {
        stoker_chunk_fini(&s->copy);
        free(s);
        return STOKER_NOMEM;
    }
    s->first_seq = first_seq;
    s->first = 0;
    s->end = count;
    for (uint32_t i = 0; i < q->schema->n_fields; i++)
        s->data[i] = s->copy.data[i];
    s->next = q->head;
    q->head = s;
    if (q->tail == NULL)
        q->tail = s;
    q->examples += count;
    q->bytes += (uint64_t)count * stoker_schema_example_bytes(q->schema);
    return STOKER_OK;
}

uint32_t
queue_take(queue *q, uint32_t max, stoker_chunk *dst, uint64_t *first_seq)
{
    segment *s = q->head;
    if (s == NULL || max == 0)
        return 0;
    uint32_t n = s->end - s->first;
    if (n > max)
        n = max;
    if (n > dst->capacity - dst->count)
        n = dst->capacity - dst->count;
    for (uint32_t i = 0; i < q->schema->n_fields; i++) {
        size_t fb = stoker_field_bytes(&q->schema->fields[i]);
        memcpy(dst->data[i] + (size_t)dst->count * fb, s->data[i] + (size_t)s->first * fb,
               (size_t)n * fb);
    }
    *first_seq = s->first_seq + s->first;
    dst->count += n;
    s->first += n;
    q->examples -= n;
    q->bytes -= (uint64_t)n * stoker_schema_example_bytes(q->schema);
    if (s->first == s->end) {
        q->head = s->next;
        if (q->head == NULL)
            q->tail = NULL;
        segment_free(s);
    }
    return n;
}
