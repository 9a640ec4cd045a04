// Names of the protocol's enums, as they appear in logs, JSON and metrics.
#include "stoker/protocol.h"

const char *
stoker_event_kind_name(stoker_event_kind kind)
{
    switch (kind) {
    case STOKER_EVENT_PRODUCER_JOINED:
        return "producer_joined";
    case STOKER_EVENT_PRODUCER_LOST:
        return "producer_lost";
    case STOKER_EVENT_PRODUCER_FINISHED:
        return "producer_finished";
    case STOKER_EVENT_PRODUCER_RECONNECTED:
        return "producer_reconnected";
    case STOKER_EVENT_EPOCH_END:
        return "epoch_end";
    case STOKER_EVENT_SCALED:
        return "scaled";
    case STOKER_EVENT_BROKER_RESTARTED:
        return "broker_restarted";
    case STOKER_EVENT_JOB_DETACHED:
        return "job_detached";
    case STOKER_EVENT_JOB_REMAKING:
        return "job_remaking";
    default:
        return "unknown";
    }
}

const char *
stoker_producer_status_name(stoker_producer_status status)
{
    switch (status) {
    case STOKER_PRODUCER_ALIVE:
        return "alive";
    case STOKER_PRODUCER_LOST:
        return "lost";
    case STOKER_PRODUCER_FINISHED:
        return "finished";
    default:
        return "unknown";
    }
}
