// Ranges of reference-counted blocks (see queue.h). All calls happen under the broker's lock,
// except the release of a reference a reply's copy took (queue_range_retain), so reference
// counts are atomic.
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "queue.h"
#include "stoker/batching.h"
#include "stoker/error.h"

struct qblock {
    _Atomic uint32_t refs;
    stoker_request *req; // the push the data belongs to
    uint64_t first_seq;  // seq of example 0 of the block
};

struct qnode {
    qnode *next, *prev;
    queue_range range;
};

// The stamps of queue.changes, one counter for every queue of the process.
static _Atomic uint64_t change_stamps;

static void
changed(queue *q)
{
    q->changes = atomic_fetch_add_explicit(&change_stamps, 1, memory_order_relaxed) + 1;
}

void
queue_init(queue *q, const stoker_schema *schema)
{
    memset(q, 0, sizeof(*q));
    changed(q);
    q->schema = schema;
    q->length_field = schema != NULL ? stoker_schema_first_variable(schema) : -1;
}

void
queue_range_release(queue_range *r)
{
    if (r->block != NULL && atomic_fetch_sub(&r->block->refs, 1) == 1) {
        stoker_request_free(r->block->req);
        free(r->block);
    }
    r->block = NULL;
}

void
queue_range_retain(const queue_range *r)
{
    if (r->block != NULL)
        atomic_fetch_add(&r->block->refs, 1);
}

void
queue_fini(queue *q)
{
    qnode *n = q->head;
    while (n != NULL) {
        qnode *next = n->next;
        queue_range_release(&n->range);
        free(n);
        n = next;
    }
    q->head = q->tail = q->hint = NULL;
    q->examples = q->bytes = q->tokens = 0;
    changed(q);
}

uint64_t
queue_range_bytes(const queue_range *r)
{
    return r->block != NULL ? stoker_chunk_bytes(&r->block->req->chunk, r->first, r->count) : 0;
}

uint64_t
queue_range_tokens(const queue_range *r, int field)
{
    if (r->block == NULL || field < 0)
        return 0;
    const stoker_chunk *c = &r->block->req->chunk;
    return stoker_chunk_var_offset(c, (uint32_t)field, r->first + r->count) -
           stoker_chunk_var_offset(c, (uint32_t)field, r->first);
}

// The examples of range r come (sign > 0) or go.
static void
account(queue *q, const queue_range *r, int sign)
{
    uint64_t bytes = queue_range_bytes(r);
    uint64_t tokens = queue_range_tokens(r, q->length_field);
    if (sign > 0) {
        q->examples += r->count;
        q->bytes += bytes;
        q->tokens += tokens;
    } else {
        q->examples -= r->count;
        q->bytes -= bytes;
        q->tokens -= tokens;
    }
}

// Appends node (its range set) at the queue's tail.
static void
link_tail(queue *q, qnode *node)
{
    node->prev = q->tail;
    if (q->tail != NULL)
        q->tail->next = node;
    else
        q->head = node;
    q->tail = node;
    account(q, &node->range, +1);
}

int
queue_append_request(queue *q, stoker_request *req, uint32_t skip)
{
    uint32_t n = req->chunk.count - skip;
    if (n == 0) {
        stoker_request_free(req);
        return STOKER_OK;
    }
    qblock *b = calloc(1, sizeof(*b));
    qnode *node = calloc(1, sizeof(*node));
    if (b == NULL || node == NULL) {
        free(b);
        free(node);
        return STOKER_NOMEM;
    }
    b->refs = 1;
    b->req = req;
    b->first_seq = req->first_seq;
    node->range =
        (queue_range){.block = b, .first = skip, .count = n, .first_seq = req->first_seq + skip};
    link_tail(q, node);
    return STOKER_OK;
}

const queue_range *
queue_tail(const queue *q)
{
    return q->tail != NULL ? &q->tail->range : NULL;
}

int
queue_append_range(queue *q, const queue_range *r)
{
    qnode *node = calloc(1, sizeof(*node));
    if (node == NULL)
        return STOKER_NOMEM;
    queue_range_retain(r);
    node->range = *r;
    link_tail(q, node);
    return STOKER_OK;
}

uint64_t
queue_copy(queue *dst, const queue *src)
{
    uint64_t n = 0;
    for (const qnode *node = src->head; node != NULL; node = node->next) {
        if (queue_append_range(dst, &node->range) != STOKER_OK)
            break;
        n += node->range.count;
    }
    return n;
}

uint32_t
queue_take(queue *q, uint32_t max, queue_range *out)
{
    return q->head != NULL ? queue_take_seq(q, q->head->range.first_seq, max, out) : 0;
}

static bool
holds_seq(const qnode *node, uint64_t seq)
{
    return seq >= node->range.first_seq && seq < node->range.first_seq + node->range.count;
}

// The node holding seq, or NULL. From the hint, where the last take left off, forward for a
// later seq, and for an earlier one back from there or forward from the head, whichever is
// nearer in seqs (the list is in seq order but for ranges put back at the head, which are older
// than what follows them or not): a queue that batches taken from its middle split into
// hundreds of nodes was walked from its head for every pick of a plan, and a plan's first pick
// is often its queue's head (budget.c, overdue). Else the whole list from the head.
static qnode *
find_seq(const queue *q, uint64_t seq)
{
    qnode *node = q->hint;
    if (node != NULL && seq >= node->range.first_seq) {
        for (; node != NULL; node = node->next)
            if (holds_seq(node, seq))
                return node;
    } else if (node != NULL && seq > q->head->range.first_seq &&
               seq - q->head->range.first_seq > node->range.first_seq - seq) {
        for (node = node->prev; node != NULL; node = node->prev)
            if (holds_seq(node, seq))
                return node;
    }
    for (node = q->head; node != NULL; node = node->next)
        if (holds_seq(node, seq))
            return node;
    return NULL;
}

// Unlinks node from the list.
static void
unlink_node(queue *q, qnode *node)
{
    if (node->prev != NULL)
        node->prev->next = node->next;
    else
        q->head = node->next;
    if (node->next != NULL)
        node->next->prev = node->prev;
    else
        q->tail = node->prev;
}

uint32_t
queue_take_seq(queue *q, uint64_t seq, uint32_t max, queue_range *out)
{
    qnode *node = find_seq(q, seq);
    q->hint = NULL; // set again below where the take leaves a node to go on from
    if (node == NULL || max == 0)
        return 0;
    queue_range *r = &node->range;
    uint32_t at = (uint32_t)(seq - r->first_seq);
    uint32_t n = r->count - at < max ? r->count - at : max;
    *out = (queue_range){.block = r->block, .first = r->first + at, .count = n, .first_seq = seq};
    if (at == 0) {
        // The node's head: it keeps what follows (or goes, taken whole: its reference moves).
        if (n == r->count) {
            unlink_node(q, node);
            q->hint = node->next != NULL ? node->next : node->prev;
            free(node);
        } else {
            atomic_fetch_add(&r->block->refs, 1);
            r->first += n;
            r->count -= n;
            r->first_seq += n;
            q->hint = node;
        }
    } else if (at + n == r->count) {
        atomic_fetch_add(&r->block->refs, 1); // the node keeps its head
        r->count = at;
        q->hint = node;
    } else {
        // From the middle: the node keeps its head, a new node after it the tail.
        qnode *tail = calloc(1, sizeof(*tail));
        if (tail == NULL)
            return 0;
        atomic_fetch_add(&r->block->refs, 2);
        tail->range = (queue_range){.block = r->block,
                                    .first = r->first + at + n,
                                    .count = r->count - at - n,
                                    .first_seq = seq + n};
        tail->next = node->next;
        tail->prev = node;
        if (node->next != NULL)
            node->next->prev = tail;
        node->next = tail;
        if (q->tail == node)
            q->tail = tail;
        r->count = at;
        q->hint = tail;
    }
    changed(q);
    account(q, out, -1);
    return n;
}

void
queue_cursor_init(const queue *q, queue_cursor *c)
{
    c->node = q->head;
    c->i = 0;
    c->offsets = NULL;
}

int
queue_cursor_next(queue_cursor *c, int field, uint64_t *seq, uint64_t *len)
{
    while (c->node != NULL && c->i >= c->node->range.count) {
        c->node = c->node->next;
        c->i = 0;
        c->offsets = NULL;
    }
    if (c->node == NULL)
        return 0;
    const queue_range *r = &c->node->range;
    *seq = r->first_seq + c->i;
    *len = 0;
    if (field >= 0) {
        if (c->offsets == NULL) {
            c->offsets =
                (const uint8_t *)r->block->req->chunk.offsets[field] + (size_t)r->first * 8;
            c->at = stoker_le64(c->offsets);
        }
        uint64_t end = stoker_le64(c->offsets + (size_t)(c->i + 1) * 8);
        *len = end - c->at;
        c->at = end;
    }
    c->i++;
    return 1;
}

uint64_t
queue_head_seq(const queue *q)
{
    return q->head->range.first_seq;
}

int
queue_put_back(queue *q, const queue_range *r)
{
    qnode *node = calloc(1, sizeof(*node));
    if (node == NULL)
        return STOKER_NOMEM;
    node->range = *r;
    node->next = q->head;
    if (q->head != NULL)
        q->head->prev = node;
    q->head = node;
    changed(q);
    if (q->tail == NULL)
        q->tail = node;
    account(q, r, +1);
    return STOKER_OK;
}

const uint8_t *
queue_range_field(const queue_range *r, const stoker_schema *schema, uint32_t f)
{
    const stoker_chunk *c = &r->block->req->chunk;
    if (schema->fields[f].variable)
        return c->data[f] +
               stoker_chunk_var_offset(c, f, r->first) * stoker_field_row_bytes(&schema->fields[f]);
    return c->data[f] + (size_t)r->first * stoker_field_bytes(&schema->fields[f]);
}

const uint8_t *
queue_range_offsets(const queue_range *r, uint32_t f)
{
    const stoker_chunk *c = &r->block->req->chunk;
    return c->offsets[f] != NULL ? (const uint8_t *)c->offsets[f] + (size_t)r->first * 8 : NULL;
}

const uint64_t *
queue_range_items(const queue_range *r)
{
    const stoker_request *req = r->block->req;
    return req->n_items > 0 ? req->items + r->first : NULL;
}
