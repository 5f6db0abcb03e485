/*
 * server_main.c: the llaisys-server program: options, then server_run (server.h).
 */
#include "server.h"

int main(int argc, char **argv)
{
    struct server_opts o;
    int r = server_opts_parse(&o, argc, argv);
    int rc = r < 0 ? 2 : r > 0 ? 0 : server_run(&o);
    server_opts_free(&o);
    return rc;
}
