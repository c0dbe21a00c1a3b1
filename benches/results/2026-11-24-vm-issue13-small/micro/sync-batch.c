// syncfs vs parallel fsync for N new files of 34,000 bytes (issue 13). Not part of zcp.
//   gcc -O2 sync-batch.c -o sync-batch -lpthread
//   ./sync-batch DIR 256 0     # one syncfs
//   ./sync-batch DIR 256 32    # fsync of each file, 32 threads
#define _GNU_SOURCE
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <fcntl.h>
#include <string.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/resource.h>
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec/1e9;}
static double cpu(){struct rusage r; getrusage(RUSAGE_SELF,&r); return r.ru_utime.tv_sec+r.ru_utime.tv_usec/1e6+r.ru_stime.tv_sec+r.ru_stime.tv_usec/1e6;}
int n, T; int *fds;
void* w(void*a){ long k=(long)a; for(int i=k;i<n;i+=T) fsync(fds[i]); return 0;}
int main(int argc,char**argv){ n=atoi(argv[2]); T=atoi(argv[3]); char buf[34000]; memset(buf,7,sizeof buf);
 mkdir(argv[1],0755); int dfd=open(argv[1],O_DIRECTORY|O_RDONLY); fds=malloc(n*sizeof(int));
 for(int i=0;i<n;i++){char nm[64]; sprintf(nm,"f%d",i); fds[i]=openat(dfd,nm,O_CREAT|O_EXCL|O_RDWR,0600); write(fds[i],buf,sizeof buf);}
 double t1=now(), c1=cpu();
 if(T==0) syncfs(dfd); else { pthread_t th[256];
 for(long k=0;k<T;k++) pthread_create(&th[k],0,w,(void*)k);
 for(int k=0;k<T;k++) pthread_join(th[k],0);}
 double t2=now(), c2=cpu();
 printf("threads %d (0=syncfs): %d files: wall %.1f ms cpu %.1f ms (%.0f us/file wall, %.0f us/file cpu)\n", T, n, (t2-t1)*1e3, (c2-c1)*1e3, (t2-t1)*1e6/n, (c2-c1)*1e6/n);
 return 0;}
