/*
 * The stderr of every compact stdio connection's child (stdio.c: past half the descriptor
 * limit a connection keeps one descriptor, not three): one datagram socket the whole
 * process shares. Each write of a child arrives as a datagram whose sender's pid the
 * kernel attaches (SO_PASSCRED), and goes to the sink registered for that pid. A thread
 * of its own reads it, started with the first compact connection and kept for the
 * process's life.
 */
#ifndef ASP_STDIO_STDERR_HUB_H
#define ASP_STDIO_STDERR_HUB_H

#include <stddef.h>
#include <sys/types.h>

/* Called with the hub's lock held: must not call the hub. */
typedef void (*stderr_hub_sink)(void *ctx, const char *buf, size_t n);

/*
 * Takes the hub's lock, starting the hub on first use; returns the write end to give a
 * child as its stderr, or -1 with errno (the lock is then not held). Hold it from the
 * spawn until stderr_hub_add_locked, so that nothing the child writes first is read
 * before its sink is known.
 */
int stderr_hub_lock(void);
void stderr_hub_unlock(void);
void stderr_hub_add_locked(pid_t pid, stderr_hub_sink sink, void *ctx);
/* Forgets `pid`'s sink: once it returns, the sink is not called for it again. */
void stderr_hub_remove(pid_t pid);
/* Delivers what is queued now (the last lines before a child's exit, say). */
void stderr_hub_drain(void);

#endif
