/*
 * webui.h: the bundled chat application, served at / without an API key. The connection's
 * thread; the embedded table is read-only.
 */
#ifndef LLAISYS_WEBUI_H
#define LLAISYS_WEBUI_H

#include <stdbool.h>
#include <stddef.h>

#include "respond.h"

/* One file of the WebUI, embedded at build time: webui/embed.mjs generates the table, which
 * only llaisys-server links (webui.c copes with its absence). */
struct webui_asset {
    const char *path;          /* URL path: "/index.html", "/assets/app-HASH.js", ... */
    const unsigned char *data; /* (len) the bytes */
    size_t len;
    const unsigned char *gz;   /* (gz_len) the same gzip-compressed, NULL: not worth it */
    size_t gz_len;
    const char *etag;          /* quoted strong ETag of data (a content hash) */
};
extern const struct webui_asset webui_assets[];
extern const int webui_n_assets;

/* Answer a GET/HEAD of the WebUI (/, /index.html, /assets/...) from the embedded files, or from
 * --webui-dir, with *res MHD's result; returns false (nothing queued) for any other path, or
 * when --no-webui. */
bool webui_route(struct http_ctx *c, enum MHD_Result *res);

#endif
