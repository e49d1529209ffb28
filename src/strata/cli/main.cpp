// The `strata` binary (placeholder until the CLI lands).
int main() { return 0; }
