/* The transport registry; the local backend is registered as an internal transport. */
#include "asp/transport.h"

#include "builtin.h"

#include <pthread.h>

#define MAX_TRANSPORTS 16

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static const asp_transport *reg[MAX_TRANSPORTS];
static size_t reg_count;

/* Adds or replaces the entry for t->kind. false when the registry is full. */
static bool put(const asp_transport *t)
{
	bool ok = true;
	pthread_mutex_lock(&reg_mu);
	size_t i = 0;
	while (i < reg_count && reg[i]->kind != t->kind)
		i++;
	if (i < reg_count)
		reg[i] = t;
	else if (reg_count < MAX_TRANSPORTS)
		reg[reg_count++] = t;
	else
		ok = false;
	pthread_mutex_unlock(&reg_mu);
	return ok;
}

void asp_transport_add(const asp_transport *t)
{
	put(t);
}

asp_status asp_transport_register(const asp_transport *t, asp_error *err)
{
	if (!t || !t->open || !t->close || !t->name)
		return asp_error_set(err, ASP_E_INVALID_ARGUMENT, NULL,
		                     "asp_transport_register: name, open and close are mandatory");
	asp_transports_init(); /* built-ins first, so an application's own one wins */
	if (!put(t))
		return asp_error_set(err, ASP_E_TOO_LARGE, NULL,
		                     "asp_transport_register: more than %d transports",
		                     MAX_TRANSPORTS);
	return ASP_OK;
}

const asp_transport *asp_transport_find(asp_transport_kind kind)
{
	asp_transports_init();
	const asp_transport *t = NULL;
	pthread_mutex_lock(&reg_mu);
	for (size_t i = 0; i < reg_count && !t; i++)
		if (reg[i]->kind == kind)
			t = reg[i];
	pthread_mutex_unlock(&reg_mu);
	return t;
}

/* The local backend as a transport (local_client.c). */
extern const asp_transport asp_local_transport;

static void register_all(void)
{
	put(&asp_local_transport);
	asp_builtin_transports_register();
}

void asp_transports_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, register_all);
}
