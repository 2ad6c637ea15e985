// A C++ global RAII guard whose destructor releases the lock as the program ends (run by
// tests/c_edges.rs): the destructor runs during exit(), after this thread's
// thread-local storage is gone.
#include <cstdio>
#include <cstring>

#include "ticketing.h"

struct Guard {
    ticketing_client *client = nullptr;
    ticketing_lock *lock = nullptr;
    ~Guard() {
        int outcome = 0;
        ticketing_error *err = nullptr;
        int rc = ticketing_lock_release(lock, &outcome, &err);
        if (rc == TICKETING_OK && outcome == TICKETING_RELEASED) {
            std::printf("global destructor release: released\n");
        } else {
            std::printf("global destructor release: FAILED %s: %s\n", ticketing_kind_name(rc),
                        err ? ticketing_error_message(err) : "");
        }
        std::fflush(stdout);
        ticketing_error_free(err);
        ticketing_lock_free(lock);
        ticketing_client_free(client);
    }
};

static Guard guard;

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    const char *addr = argv[1], *secret = argv[2], *key = argv[3];
    ticketing_error *err = nullptr;
    if (ticketing_client_new(&addr, 1, reinterpret_cast<const uint8_t *>(secret), std::strlen(secret), nullptr,
                             nullptr, &guard.client, &err) != TICKETING_OK) {
        std::printf("FAILED client_new: %s\n", ticketing_error_message(err));
        return 1;
    }
    int rc = ticketing_acquire(guard.client, key, 20 * TICKETING_NS_PER_S, 5 * TICKETING_NS_PER_S, &guard.lock, &err);
    if (rc != TICKETING_OK) {
        std::printf("FAILED acquire: %s\n", ticketing_error_message(err));
        return 1;
    }
    std::printf("acquired %s; exiting\n", key);
    return 0;
}
