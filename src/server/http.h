/*
 * http.h: the libmicrohttpd daemon of the server: listen, route each request (after its body
 * and API key), and stop. Called by server.c on the main thread.
 */
#ifndef LLAISYS_HTTP_H
#define LLAISYS_HTTP_H

#include "errors.h"

struct server;

/* Start libmicrohttpd on the options' host and port (*port: the port bound, for port 0).
 * Returns LL_OK, LL_EINVAL (host not an address) or LL_EIO (cannot listen), with err set. */
enum ll_status http_start(struct server *srv, int *port, struct ll_err *err);
/* Stop accepting connections; returns the listening socket (close it after http_stop), or -1
 * when not started. */
int http_quiesce(struct server *srv);
/* Close every connection, join their threads, then close listen_fd (if >= 0). */
void http_stop(struct server *srv, int listen_fd);

#endif
