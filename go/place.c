// The C side of a hold's place in line: a ticketing_place_callback that hands the place,
// and the id of the hold's sink it was given, to Go (goPlace, exported from hold.go).

#include <stdint.h>
#include "ticketing.h"
#include "_cgo_export.h"

static void ticketing_go_place(uint32_t ahead, uint32_t grants_per_ks, void *ctx) {
    goPlace((uintptr_t)ctx, ahead, grants_per_ks);
}

int ticketing_go_hold_start(const ticketing_client *client, const ticketing_hold_part *parts, size_t parts_len,
                            int64_t lease_ns, int64_t wait_ns, int places, uintptr_t sink,
                            ticketing_future **future_out, ticketing_error **error_out) {
    return ticketing_hold_start(client, parts, parts_len, lease_ns, wait_ns, places ? ticketing_go_place : NULL,
                                (void *)sink, future_out, error_out);
}
