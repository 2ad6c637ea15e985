// The C side of the futures' callback: a ticketing_callback that hands the Go handle it
// was given back to Go (goFutureDone, exported from future.go).

#include <stdint.h>
#include "ticketing.h"
#include "_cgo_export.h"

static void ticketing_go_done(ticketing_future *future, void *ctx) {
    (void)future;
    goFutureDone((uintptr_t)ctx);
}

int ticketing_go_set_callback(ticketing_future *future, uintptr_t handle, ticketing_error **error_out) {
    return ticketing_future_set_callback(future, ticketing_go_done, (void *)handle, error_out);
}
