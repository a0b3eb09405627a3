// bench/copy_alignment.c — the evidence for issue 14's cause, without flowlab: one TCP
// connection on loopback, a sender thread writing 128 KiB blocks for SECONDS, the
// receiver reading them into a buffer that starts RECV_OFFSET bytes past a page
// boundary (the sender's block starts SEND_OFFSET past one); prints the receiver's
// Gbit/s. bench/copy_alignment.sh builds it and runs the offsets alternately.
//
// Usage: copy_alignment RECV_OFFSET SEND_OFFSET SECONDS CONGESTION_CONTROL
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { BLOCK = 128 * 1024, ROOM = BLOCK + 2 * 4096 };

static struct sockaddr_in addr;
static double seconds;
static const char *cc;
static long send_offset;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static char *page_buffer(void) {
    char *p = mmap(NULL, ROOM, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    memset(p, 7, ROOM);
    return p;
}

static void *sender(void *unused) {
    (void)unused;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (setsockopt(s, IPPROTO_TCP, TCP_CONGESTION, cc, strlen(cc)) != 0) {
        perror("TCP_CONGESTION");
        exit(1);
    }
    if (connect(s, (struct sockaddr *)&addr, sizeof addr) != 0) {
        perror("connect");
        exit(1);
    }
    char *block = page_buffer() + send_offset;
    double end = now() + seconds;
    while (now() < end)
        if (write(s, block, BLOCK) < 0)
            break;
    close(s);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s RECV_OFFSET SEND_OFFSET SECONDS CC\n", argv[0]);
        return 2;
    }
    long recv_offset = atol(argv[1]);
    send_offset = atol(argv[2]);
    seconds = atof(argv[3]);
    cc = argv[4];
    if (recv_offset < 0 || recv_offset > 4096 || send_offset < 0 || send_offset > 4096) {
        fprintf(stderr, "offsets are 0 to 4096\n");
        return 2;
    }
    int l = socket(AF_INET, SOCK_STREAM, 0);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (bind(l, (struct sockaddr *)&addr, sizeof addr) || listen(l, 1) ||
        getsockname(l, (struct sockaddr *)&addr, &len)) {
        perror("listen");
        return 1;
    }
    pthread_t t;
    pthread_create(&t, NULL, sender, NULL);
    int s = accept(l, NULL, NULL);
    char *buf = page_buffer() + recv_offset;
    long long total = 0;
    ssize_t n;
    double t0 = now();
    while ((n = read(s, buf, BLOCK)) > 0)
        total += n;
    double dt = now() - t0;
    pthread_join(t, NULL);
    printf("%.3f\n", total * 8 / dt / 1e9);
    return 0;
}
