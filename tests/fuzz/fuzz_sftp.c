/*
 * Target "sftp": the bytes an SFTP server sends back, as the SSH transport takes them
 * (transport-ssh/ssh_sftp_proto.c, sftp_take_packets: packet lengths, the VERSION reply
 * and its extensions, replies matched to requests by id, DATA straight into the
 * caller's buffer) and then reads each reply's body the way ssh_sftp.c does (STATUS
 * code and message, HANDLE, NAME entries with their attributes, ATTRS, the limits
 * extension's numbers).
 *
 * The handle table (ssh_sftp_handles.c) follows the answers to four OPENs among them:
 * a guess never names a handle that is open.
 *
 * The input: one byte saying which of the eight pending requests read DATA into a
 * buffer of their own, one byte where the stream is cut in two (replies arrive in
 * pieces), then the stream.
 */
#include "ssh_sftp.h"

#include "fuzz_common.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The rest of the SSH transport is not linked: nothing here may reach it. */
#define UNREACHABLE() fuzz_fail(__FILE__, __LINE__, "sftp_take_packets did I/O")
uint64_t ssh_now_ns(void)
{
	UNREACHABLE();
}
bool sshc_wait(sshc *c, uint64_t deadline)
{
	(void)c, (void)deadline;
	UNREACHABLE();
}
bool sshc_check(sshc *c)
{
	(void)c;
	UNREACHABLE();
}
asp_status sshc_dead_error(sshc *c, const char *what, asp_error *err)
{
	(void)c, (void)what, (void)err;
	UNREACHABLE();
}
uint64_t sshc_setup_deadline(const sshc *c)
{
	(void)c;
	UNREACHABLE();
}
asp_status sshc_channel_open(sshc *c, enum sshc_class k, uint64_t slot_deadline, uint64_t deadline,
                             ssh_channel *out, asp_error *err)
{
	(void)c, (void)k, (void)slot_deadline, (void)deadline, (void)out, (void)err;
	UNREACHABLE();
}
asp_status sshc_channel_exec(sshc *c, ssh_channel ch, const char *cmd, bool subsystem,
                             uint64_t deadline, asp_error *err)
{
	(void)c, (void)ch, (void)cmd, (void)subsystem, (void)deadline, (void)err;
	UNREACHABLE();
}
int sshc_channel_exec_step(sshc *c, ssh_channel ch, const char *cmd, bool subsystem, asp_error *err)
{
	(void)c, (void)ch, (void)cmd, (void)subsystem, (void)err;
	UNREACHABLE();
}
size_t sshc_channel_write(sshc *c, ssh_channel ch, const void *d, size_t len, uint64_t deadline)
{
	(void)c, (void)ch, (void)d, (void)len, (void)deadline;
	UNREACHABLE();
}
void sshc_channel_free(sshc *c, ssh_channel ch, enum sshc_class k)
{
	(void)c, (void)ch, (void)k;
	UNREACHABLE();
}
int ssh_channel_read_nonblocking(ssh_channel channel, void *dest, uint32_t count, int is_stderr)
{
	(void)channel, (void)dest, (void)count, (void)is_stderr;
	UNREACHABLE();
}
uint32_t ssh_channel_window_size(ssh_channel channel)
{
	(void)channel;
	UNREACHABLE();
}
int ssh_channel_read_timeout(ssh_channel channel, void *dest, uint32_t count, int is_stderr,
                             int timeout_ms)
{
	(void)channel, (void)dest, (void)count, (void)is_stderr, (void)timeout_ms;
	UNREACHABLE();
}
int ssh_channel_close(ssh_channel channel)
{
	(void)channel;
	UNREACHABLE();
}
int ssh_channel_poll(ssh_channel channel, int is_stderr)
{
	(void)channel, (void)is_stderr;
	UNREACHABLE();
}
size_t sshc_bulk_room(int held, uint32_t window)
{
	(void)held, (void)window;
	UNREACHABLE();
}
int sshc_channel_read_held(ssh_channel ch, int stream, int held, uint32_t window, uint8_t *dst)
{
	(void)ch, (void)stream, (void)held, (void)window, (void)dst;
	UNREACHABLE();
}

#define NREQ 8

/* Reads a reply body as ssh_sftp.c's callers do; every read is bounds-checked by scur. */
static void read_body(const sreq *r)
{
	scur c = {r->body, r->len, false};
	size_t l;
	sattr a;
	switch (r->type) {
	case FXP_STATUS: {
		int code = sftp_status(r);
		FUZZ_CHECK(code == -1 || r->len >= 4, "a status code needs 4 bytes");
		(void)sc_u32(&c);
		const uint8_t *msg = sc_str(&c, &l);
		FUZZ_CHECK(c.bad || (msg && l <= r->len), "a message inside the reply");
		break;
	}
	case FXP_HANDLE:
	case FXP_DATA: {
		const uint8_t *s = sc_str(&c, &l);
		FUZZ_CHECK(c.bad || (s >= r->body && s + l <= r->body + r->len),
		           "inside the reply");
		break;
	}
	case FXP_NAME: {
		uint32_t n = sc_u32(&c);
		for (uint32_t i = 0; i < n && !c.bad; i++) {
			sc_str(&c, &l);
			sc_str(&c, &l);
			sc_attrs(&c, &a);
		}
		break;
	}
	case FXP_ATTRS: sc_attrs(&c, &a); break;
	case FXP_EXTENDED_REPLY:
		(void)sc_u64(&c);
		(void)sc_u64(&c);
		(void)sc_u64(&c);
		break;
	default: break;
	}
	FUZZ_CHECK(c.n <= r->len, "the cursor stays inside the reply");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	uint8_t with_dst = data[0];
	size_t cut = data[1];
	data += 2;
	size -= 2;
	if (cut > size)
		cut = size;

	sftpc f;
	memset(&f, 0, sizeof f);
	sreq req[NREQ];
	uint8_t bufs[NREQ][64];
	memset(req, 0, sizeof req);
	for (int i = NREQ - 1; i >= 0; i--) {
		req[i].id = (uint32_t)i + 1;
		req[i].pending = true;
		if (with_dst & (1u << i)) {
			req[i].dst = bufs[i];
			req[i].dst_cap = sizeof bufs[i] >> (i & 3); /* 64, 32, 16, 8 */
		}
		req[i].next = f.pending;
		f.pending = &req[i];
	}
	/* the handle table saw requests 1, 2, 5 and 6 as OPENs, a CLOSE of slot 0 between */
	static const uint8_t close0[8] = {0, 0, 0, 4, 0, 0, 0, 0};
	for (uint32_t id = 1; id <= NREQ; id++) {
		if (id == 1 || id == 2 || id == 5 || id == 6)
			sftp_handles_sent(&f, FXP_OPEN, id, NULL, 0);
		if (id == 3)
			sftp_handles_sent(&f, FXP_CLOSE, id, close0, sizeof close0);
	}
	f.rx_cap = size ? size : 1;
	f.rx = malloc(f.rx_cap);
	FUZZ_CHECK(f.rx, "malloc");

	/* Two arrivals, the way sftp_pump keeps a partial packet at the front. */
	memcpy(f.rx, data, cut);
	f.rx_len = cut;
	bool ok = sftp_take_packets(&f);
	if (ok) {
		memmove(f.rx, f.rx + f.rx_off, f.rx_len - f.rx_off);
		f.rx_len -= f.rx_off;
		f.rx_off = 0;
		memcpy(f.rx + f.rx_len, data + cut, size - cut);
		f.rx_len += size - cut;
		sftp_take_packets(&f);
	}
	FUZZ_CHECK(f.rx_off <= f.rx_len && f.rx_len <= f.rx_cap, "the buffer stays consistent");

	for (int i = 0; i < NREQ; i++) {
		sreq *r = &req[i];
		if (!r->done) {
			FUZZ_CHECK(r->pending && !r->body,
			           "an unanswered request is still pending");
			continue;
		}
		FUZZ_CHECK(!r->pending, "an answered request left the list");
		if (r->type == FXP_DATA && r->dst && !r->body)
			FUZZ_CHECK(r->len <= r->dst_cap, "DATA fits the caller's buffer");
		else if (r->type != 0)
			read_body(r);
		free(r->body);
	}
	int listed = 0;
	for (sreq *r = f.pending; r; r = r->next)
		FUZZ_CHECK(++listed <= NREQ && r->pending && !r->done, "the pending list");
	/* whatever the answers, a guess never names a handle of ours that is open */
	const sftp_handles *h = &f.handles;
	FUZZ_CHECK(h->n_free <= h->slots + 1 && h->n_open <= h->slots && h->pending <= 4,
	           "the handle table stays within what was sent");
	uint8_t g[4];
	if (sftp_handles_guess(&f, g)) {
		uint32_t v =
		    (uint32_t)g[0] << 24 | (uint32_t)g[1] << 16 | (uint32_t)g[2] << 8 | g[3];
		for (size_t i = 0; i < h->n_open; i++)
			FUZZ_CHECK(h->open[i] != v, "a guess names an open handle");
	}
	sftp_handles_reset(&f);
	free(f.rx);
	return 0;
}
