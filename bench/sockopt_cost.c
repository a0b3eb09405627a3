// bench/sockopt_cost.c — what one `--trace` sample's system calls cost: getsockopt
// TCP_INFO (the sample), and SO_SNDBUF + SO_RCVBUF (the buffer sizes read beside it,
// since autotuning changes them), each timed over N calls on a connected loopback TCP
// socket; prints ns per call. Build and run: cc -O2 -o /tmp/sc bench/sockopt_cost.c &&
// /tmp/sc 1000000
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
        getsockname(l, (struct sockaddr *)&a, &len)) {
        perror("listen");
        return 1;
    }
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, (struct sockaddr *)&a, sizeof a)) {
        perror("connect");
        return 1;
    }
    struct tcp_info info;
    int v;
    for (int round = 0; round < 3; round++) {
        double t0 = now();
        for (long i = 0; i < n; i++) {
            socklen_t il = sizeof info;
            getsockopt(s, IPPROTO_TCP, TCP_INFO, &info, &il);
        }
        double t1 = now();
        for (long i = 0; i < n; i++) {
            socklen_t vl = sizeof v;
            getsockopt(s, SOL_SOCKET, SO_SNDBUF, &v, &vl);
            vl = sizeof v;
            getsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, &vl);
        }
        double t2 = now();
        printf("round %d: TCP_INFO %.0f ns; SO_SNDBUF + SO_RCVBUF %.0f ns\n", round + 1,
               (t1 - t0) / n * 1e9, (t2 - t1) / n * 1e9);
    }
    return 0;
}
