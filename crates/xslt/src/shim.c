/* libxslt reports errors through a printf-style, C-variadic callback
 * (xsltSetGenericErrorFunc), which stable Rust cannot define. This shim formats each report
 * and hands the text to the Rust function set with turnpike_xslt_set_report. */

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

static void (*report)(const char *text) = NULL;

/* Sets the function that receives each formatted report. Called once, before the handler
 * below is given to libxslt. */
void turnpike_xslt_set_report(void (*f)(const char *text)) {
    report = f;
}

/* The generic error handler given to libxslt: formats the report (cut at 2 KiB) and passes it
 * on. */
void turnpike_xslt_generic_error(void *ctx, const char *msg, ...) {
    char text[2048];
    va_list args;
    (void)ctx;
    if (msg == NULL || report == NULL) {
        return;
    }
    va_start(args, msg);
    vsnprintf(text, sizeof text, msg, args);
    va_end(args);
    report(text);
}
