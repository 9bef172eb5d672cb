/*
 * LD_PRELOAD library for httperf: a select() with a zero timeout waits up to
 * SELECT_WAIT_US for a ready socket instead of returning at once.
 *
 * httperf 0.9.0 as Debian builds it (without DONT_POLL) polls its sockets
 * with select(..., {0, 0}) in a loop: it spins a whole CPU even at 15
 * requests/s. Its loop is: read the clock and run the due timers, then
 * select(), then handle the ready sockets, stamped with the clock read
 * before the select(). So that these stamps stay exact, a wait that ends
 * with a ready socket is reported as "nothing ready" (0); httperf loops,
 * reads the clock, and the next zero-timeout select() polls without waiting
 * and reports the sockets, still ready (level-triggered). What changes is
 * that httperf's timers (the connection rate, the timeouts) fire up to
 * SELECT_WAIT_US late. Any other select() passes through unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <sys/select.h>

#ifndef SELECT_WAIT_US
#define SELECT_WAIT_US 10000
#endif

typedef int (*select_fn)(int, fd_set *, fd_set *, fd_set *, struct timeval *);

static select_fn real_select;
static int ready_pending; /* the last wait ended with a ready socket: poll on the next call */

__attribute__((constructor)) static void find_select(void)
{
    real_select = (select_fn) dlsym(RTLD_NEXT, "select");
}

static fd_set *copy(const fd_set *set, fd_set *into)
{
    if (set == NULL)
        return NULL;
    *into = *set;
    return into;
}

static void clear(fd_set *set)
{
    if (set != NULL)
        FD_ZERO(set);
}

int select(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds, struct timeval *timeout)
{
    if (real_select == NULL)
        find_select();
    if (timeout == NULL || timeout->tv_sec != 0 || timeout->tv_usec != 0 || ready_pending) {
        ready_pending = 0;
        return real_select(nfds, readfds, writefds, exceptfds, timeout);
    }
    fd_set r, w, e;
    struct timeval wait = {0, SELECT_WAIT_US};
    int n = real_select(nfds, copy(readfds, &r), copy(writefds, &w), copy(exceptfds, &e), &wait);
    if (n < 0)
        return n;
    ready_pending = n > 0;
    clear(readfds);
    clear(writefds);
    clear(exceptfds);
    return 0;
}
