// The live page served at / on the broker's HTTP port (--metrics): server/page/index.html, turned
// into a C array at build time by server/page/embed.py. One self-contained page (its style and
// script inline) that draws the status snapshot it polls from /status; no other origin.
#ifndef SERVER_PAGE_H
#define SERVER_PAGE_H

#include <stddef.h>

extern const char stoker_page_html[]; // the page's bytes (static; not NUL-terminated text)
extern const size_t stoker_page_html_len;

#endif
